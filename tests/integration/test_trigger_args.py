"""`tasks trigger --arg/--args-json` against a real database: the arguments are recorded on the
occurrence (and shown), the overlap policy still applies, bad input and arguments over the
limit write nothing, and a build before revision 0034 being registered refuses them."""

import json

import pytest

from scheduler_daemon.domain import limit
from tests.conftest import row_counts
from tests.support import EVERY_MINUTE, OLD_INSTANCE, query


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


def test_arguments_are_refused_beside_an_older_build(cli, db, database_url) -> None:
    cli("tasks", "add", "p", *EVERY_MINUTE)
    query(database_url, OLD_INSTANCE, ("old-1", "0032"))
    before = row_counts(db)
    result = cli("tasks", "trigger", "p", "--arg", "a=1")
    assert result.code == 2
    assert "cannot be triggered with arguments" in result.err
    assert "old-1" in result.err
    assert row_counts(db) == before
    assert cli("tasks", "trigger", "p").code == 0  # without arguments it still runs
