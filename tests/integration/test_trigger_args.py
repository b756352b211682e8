"""`tasks trigger --arg/--args-json` against a real database: the arguments are recorded on the
occurrence (and shown), the overlap policy still applies, bad input and arguments over the
limit write nothing."""

import json

import pytest

from scheduler_daemon.domain import limit
from tests.conftest import row_counts
from tests.support import EVERY_MINUTE, query


def test_arguments_are_recorded_on_the_occurrence_and_shown(cli, database_url) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    given = {"region": "eu", "ids": [1, 2], "deep": {"x": None}}
    done = cli("tasks", "trigger", "p", "--args-json", json.dumps(given), "--json")
    assert done.code == 0, done.err
    assert done.json()["args"] == given
    (row,) = query(database_url, "SELECT args FROM occurrence")
    assert row["args"] == given
    shown = cli("runs", "show", "--occurrence", str(done.json()["id"]), "--json").json()
    assert shown["args"] == given
    assert [r["args"] for r in cli("runs", "list", "--json").json()] == [given]
    pairs = cli("tasks", "trigger", "p", "--arg", "a=1", "--arg", "b=x=y", "--json").json()
    assert pairs["args"] == {"a": "1", "b": "x=y"}  # each value a string; the first = splits
    plain = cli("tasks", "trigger", "p", "--json").json()
    assert plain["args"] is None


def test_the_overlap_policy_still_applies(cli, database_url) -> None:
    cli("tasks", "add", "f", *EVERY_MINUTE, "--overlap", "forbid")
    first = cli("tasks", "trigger", "f", "--arg", "n=1", "--json").json()
    second = cli("tasks", "trigger", "f", "--arg", "n=2", "--json").json()
    assert first["status"] == "queued"
    assert (second["status"], second["reason"]) == ("skipped", "overlap")
    assert second["args"] == {"n": "2"}  # recorded on the skipped row too: its history says so


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (("--args-json", "[1, 2]"), "must be a JSON object"),
        (("--args-json", "{oops"), "is not JSON"),
        (("--arg", "novalue"), "is not KEY=VALUE"),
        (("--arg", "=v"), "is not KEY=VALUE"),
        (("--arg", "a=1", "--arg", "a=2"), "given twice"),
        (("--arg", "a=1", "--args-json", "{}"), "not both"),
        (("--arg", "a=1", "--count", "2"), "drop --count"),
        (("--args-json", json.dumps({"a": "\u0000"})), "NUL"),
        (("--args-json", '{"a": NaN}'), "not a JSON object"),  # jsonb cannot hold it
        (("--args-json", '{"a": "\\ud800"}'), "not a JSON object"),  # a lone surrogate
        (("--args-json", json.dumps({"a": "x" * limit.MAX_ARGS_BYTES})), "at most 65,536"),
    ],
)
def test_bad_arguments_are_one_line_exit_2_and_nothing_written(cli, db, options, says) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    before = row_counts(db)
    result = cli("tasks", "trigger", "p", *options)
    assert result.code == 2
    assert says in result.err
    assert result.err.count("\n") == 1
    assert row_counts(db) == before


def test_arguments_at_the_limit_are_accepted(cli, database_url) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    # {"a":"…"} is 8 bytes of JSON around the value: exactly the limit.
    given = {"a": "x" * (limit.MAX_ARGS_BYTES - 8)}
    done = cli("tasks", "trigger", "p", "--args-json", json.dumps(given), "--json")
    assert done.code == 0, done.err
    assert query(database_url, "SELECT args FROM occurrence")[0]["args"] == given


@pytest.mark.parametrize(
    "args",
    [[1, 2], {"a": "\u0000"}, {"a": object()}, {"a": "x" * limit.MAX_ARGS_BYTES}],
    ids=["not-an-object", "nul", "not-json", "over-the-limit"],
)
def test_the_client_api_checks_arguments_as_the_cli_does(client, db, args) -> None:
    """`Client.trigger(args=...)` is checked as `--args-json` is: one InvalidArgument, nothing
    written. Before, it passed them to the database unchecked (100 KB was accepted; a NUL or a
    non-object was a raw database error, a value JSON cannot hold a TypeError)."""
    from scheduler_daemon.domain.argument import InvalidArgument
    from tests.support import shell_task

    shell_task(client, "p")
    before = row_counts(db)
    with pytest.raises(InvalidArgument):
        client.trigger("p", requested_by="test", args=args)
    assert row_counts(db) == before


def _nested_text(depth: int) -> str:
    """A JSON object `depth` levels deep: {"a":{"a":...1...}}."""
    return '{"a":' * depth + "1" + "}" * depth


def _nested(depth: int) -> dict[str, object]:
    value: object = 1
    for _ in range(depth):
        value = {"a": value}
    assert isinstance(value, dict)
    return value


def test_arguments_nested_32_levels_are_accepted(cli, client, database_url) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE, "--overlap", "allow")
    done = cli("tasks", "trigger", "p", "--args-json", _nested_text(32), "--json")
    assert done.code == 0, done.err
    assert done.json()["args"] == _nested(32)
    client.trigger("p", requested_by="test", args=_nested(32))
    rows = query(database_url, "SELECT args FROM occurrence")
    assert [r["args"] for r in rows] == [_nested(32)] * 2


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
def test_arguments_nested_deeper_than_32_levels_are_one_line_exit_2(cli, db, depth) -> None:
    """Issue 44 (KNOWN-FAILURES 40): on the old code 33 and 1,000 levels were stored (about 980
    made every daemon's claim raise RecursionError), and 100,000 printed a traceback from
    json.loads. The depth is measured by a loop before anything recursive reads the text."""
    cli("tasks", "add", "p", *EVERY_MINUTE)
    before = row_counts(db)
    result = cli("tasks", "trigger", "p", "--args-json", _nested_text(depth))
    assert result.code == 2, result
    assert result.err == f"error: --args-json is JSON nested {depth} levels deep; at most 32\n"
    assert row_counts(db) == before


@pytest.mark.parametrize("depth", [33, 1_000, 100_000])
def test_the_client_refuses_arguments_nested_deeper_than_32_levels(client, db, depth) -> None:
    """`Client.trigger(args=)` with the same bound: the old code stored 33 and 1,000 levels and
    raised RecursionError (not InvalidArgument) from json.dumps at 100,000."""
    from scheduler_daemon.domain.argument import InvalidArgument
    from tests.support import shell_task

    shell_task(client, "p")
    before = row_counts(db)
    with pytest.raises(InvalidArgument, match="nest more than 32 levels deep"):
        client.trigger("p", requested_by="test", args=_nested(depth))
    assert row_counts(db) == before


def test_a_recursion_error_in_any_command_is_one_line_exit_2(cli, db, monkeypatch) -> None:
    """Whatever recursive reader a future input meets, the CLI prints one line, exit 2, instead
    of a traceback (the old entry point let RecursionError through: exit 1, a traceback)."""
    from scheduler_daemon.domain import argument

    def recurse(*_: object) -> object:
        return recurse()

    monkeypatch.setattr(argument, "trigger_args", recurse)
    cli("tasks", "add", "p", *EVERY_MINUTE)
    before = row_counts(db)
    result = cli("tasks", "trigger", "p", "--arg", "a=1")
    assert result.code == 2, result
    assert result.err == "error: the input nests too deeply to be read (RecursionError)\n"
    assert row_counts(db) == before
