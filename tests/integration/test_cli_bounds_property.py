"""Property: whatever the command line or a task file gives, the CLI either does it (exit 0, the
row as given) or refuses it (exit 2, one `error:` line, no traceback, no row changed in any
table), never exit 1 or 3. Each finding of issue 28 (parts 2 and 4) is an @example.

The examples run in the derandomized "ci" profile (tests/conftest.py), on one database: a
success is deleted again before the next example."""

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.conftest import row_counts

pytestmark = pytest.mark.smoke

PROFILE = settings(settings.get_profile("ci"), max_examples=300)

INTS = st.one_of(
    st.sampled_from([0, 1, -1, 2**31 - 1, 2**31, 2**63 - 1, 2**63, 100_000, 100_001, 10_001]),
    st.integers(),
).map(str)
ODD_CHARS = st.characters(categories=["Cc", "Cf", "Cs", "Nd", "No", "Zs"])
TEXTS = st.one_of(
    st.text(st.one_of(st.characters(), ODD_CHARS), min_size=1, max_size=24),
    st.sampled_from(["x" * 10_000, "k" * 201, "k" * 200, "a\x00b", "a\x1b[2Jb", "a\u200bb"]),
)
DURATIONS = st.one_of(
    st.sampled_from(
        [
            *("1m", "nan", "inf", "1e20", "999999999d", "2500000d", "36525d", "36526d"),
            *("0.5ms", "1ms", "٣s", "²", "PT1S", "-5s", "0", "9" * 30),
        ]
    ),
    st.text(st.sampled_from("0123456789.dhmsuPT٣²"), min_size=1, max_size=12),
)


def _task_add() -> st.SearchStrategy[tuple[str, ...]]:
    optional = st.one_of(
        st.just(()),
        st.tuples(st.just("--concurrency-key"), TEXTS),
        st.tuples(st.just("--max-attempts"), INTS),
        st.tuples(st.just("--catchup-limit"), INTS),
        st.tuples(st.sampled_from(["--timeout", "--history-retention", "--backoff"]), DURATIONS),
        st.tuples(st.just("--at"), st.sampled_from(["9999-12-31T23:59:59-14:00", "2300-01-01Z"])),
    )
    return st.builds(
        lambda name, every, command, more: (
            ("tasks", "add", name, "--command", command)
            + (() if more[:1] == ("--at",) else ("--every", every))
            + more
        ),
        TEXTS,
        DURATIONS,
        st.one_of(st.just("true"), TEXTS),
        optional,
    )


COMMANDS = st.one_of(
    _task_add(),
    st.tuples(st.just("config"), st.just("set"), st.just("max-concurrent-runs"), INTS | TEXTS),
    st.tuples(st.just("config"), st.just("set"), st.just("history-retention"), DURATIONS),
    st.tuples(st.just("tasks"), st.just("next"), st.just("t"), st.just("-n"), INTS),
    st.tuples(st.just("tasks"), st.sampled_from(["show", "pause", "trigger"]), INTS | TEXTS),
    st.tuples(st.just("tasks"), st.just("list"), st.sampled_from(["--prefix", "--after"]), TEXTS),
    st.tuples(st.just("runs"), st.just("list"), st.sampled_from(["--limit", "--after"]), INTS),
)


def check(cli: Any, db: Any, args: tuple[str, ...]) -> None:
    before = row_counts(db)
    result = cli(*args, "--json") if args[:2] == ("tasks", "add") else cli(*args)
    assert "Traceback" not in result.err, result.err
    if result.code == 0:
        _check_as_given(cli, args, result)
    else:
        assert result.code == 2, (args, result)
        assert result.err.startswith("error: "), result.err
        assert result.err.count("\n") == 1, result.err
        assert row_counts(db) == before, args
    delete_all_but_t(cli, db)


def delete_all_but_t(cli: Any, db: Any) -> None:
    """Deletes what a success added (through the CLI: deleted rows stay, names are freed)."""
    for row in db.execute("SELECT id FROM task WHERE name <> 't' AND deleted_at IS NULL"):
        assert cli("tasks", "delete", str(row["id"]), "--force").code == 0


def _check_as_given(cli: Any, args: tuple[str, ...], result: Any) -> None:
    if args[:2] == ("tasks", "add"):
        row = result.json()
        assert row["name"] == args[2]
        given = dict(zip(args[5::2], args[6::2], strict=False))
        if "--concurrency-key" in given:
            assert row["concurrency_key"] == given["--concurrency-key"]
        if "--max-attempts" in given:
            assert row["max_attempts"] == int(given["--max-attempts"])
    elif args[:3] == ("config", "set", "max-concurrent-runs"):
        assert cli("config", "show", "--json").json()["max-concurrent-runs"] == int(args[3])


@pytest.fixture
def with_task(cli: Any) -> Any:
    added = cli("tasks", "add", "t", "--cron", "* * * * *", "--command", "true")
    assert added.code == 0, added.err
    return cli


@PROFILE
@given(args=COMMANDS)
@example(args=("config", "set", "max-concurrent-runs", "2147483648"))
@example(args=("config", "set", "max-concurrent-runs", "²"))
@example(args=("config", "set", "history-retention", "999999999d"))
@example(args=("config", "set", "history-retention", "²"))
@example(
    args=("tasks", "add", "a", "--command", "x", "--every", "1m", "--history-retention", "2500000d")
)
@example(
    args=("tasks", "add", "a", "--command", "x", "--every", "1m", "--concurrency-key", "k" * 8000)
)
@example(args=("tasks", "add", "a", "--command", "x", "--at", "9999-12-31T23:59:59-14:00"))
@example(args=("tasks", "add", "a", "--command", "x", "--every", "999999999d"))
@example(
    args=("tasks", "add", "a", "--command", "x", "--every", "1m", "--max-attempts", str(2**31))
)
@example(
    args=("tasks", "add", "a", "--command", "x", "--every", "1m", "--catchup-limit", str(2**31))
)
@example(args=("tasks", "add", "a\x00b", "--command", "x", "--every", "1m"))
@example(args=("tasks", "add", "a", "--command", "tr\x00ue", "--every", "1m"))
@example(args=("tasks", "add", "a\x1b[2J", "--command", "x", "--every", "1m"))
@example(args=("tasks", "add", "a\u200b", "--command", "x", "--every", "1m"))
@example(args=("tasks", "next", "t", "-n", str(2**31)))
@example(args=("tasks", "show", str(2**63)))
@example(args=("tasks", "show", "²"))
@example(args=("tasks", "list", "--prefix", "a\x00b"))
@example(args=("runs", "list", "--limit", str(2**63)))
@example(args=("runs", "list", "--after", str(2**63)))
def test_a_command_line_is_done_as_given_or_refused_in_one_line(with_task, db, args) -> None:
    check(with_task, db, args)


# -- task files ---------------------------------------------------------------------------------

NUMBERS = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "1e20", "1e-9", "0.5", str(2**31), str(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True).map(lambda f: repr(f).replace("e+", "e")),
    st.integers().map(str),
)
FIELDS = st.dictionaries(
    st.sampled_from(["every", "timeout", "max-attempts", "catchup-limit", "concurrency-key"]),
    st.one_of(NUMBERS, TEXTS.map(json.dumps), DURATIONS.map(json.dumps)),
    max_size=3,
)


def _file(name: str, fields: dict[str, str]) -> bytes:
    lines = [f"[{json.dumps(name)}]", 'command = "true"']
    lines += [f"{key} = {value}" for key, value in fields.items()]
    if "every" not in fields:
        lines.append('every = "1m"')
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogatepass")


FILES = st.one_of(
    st.builds(_file, TEXTS, FIELDS),
    st.builds(lambda body: b"\xef\xbb\xbf" + body, st.builds(_file, TEXTS, FIELDS)),
    st.integers(1, 5000).map(lambda n: b"x = " + b"[" * n + b"]" * n + b"\n"),
    st.binary(max_size=64),
)


@PROFILE
@given(data=FILES)
@example(data=b'[t1]\ncommand = "x"\nevery = nan\n')
@example(data=b'[t1]\ncommand = "x"\nevery = inf\n')
@example(data=b'[t1]\ncommand = "x"\nevery = 1e20\n')
@example(data=b"x = " + b"[" * 5000 + b"]" * 5000 + b"\n")
@example(data=b'[t1]\ncommand = "\xff"\nevery = "1m"\n')
@example(data=b'\xef\xbb\xbf[t1]\ncommand = "true"\nevery = "1m"\n')
@example(data=b'[t1]\ncommand = "true"\nevery = "1m"\nconcurrency-key = "' + b"k" * 8000 + b'"\n')
@example(data=b'[t1]\ncommand = "true"\nevery = "1m"\nhistory-retention = "2500000d"\n')
@example(data=b'[t1]\ncommand = "true"\nevery = "1m"\nmax-attempts = 2147483648\n')
@example(data=b'["a\\u0000b"]\ncommand = "true"\nevery = "1m"\n')
@example(data=b'["a\\u001b[2J"]\ncommand = "true"\nevery = "1m"\n')
def test_a_task_file_is_applied_as_given_or_refused_in_one_line(
    with_task, db, tmp_path: Path, data: bytes
) -> None:
    path = tmp_path / "tasks.toml"
    path.write_bytes(data)
    before = row_counts(db)
    result = with_task("tasks", "apply", "-f", str(path), "--source", "property")
    assert "Traceback" not in result.err, result.err
    if result.code == 0:  # the rows as the file gives them
        document = tomllib.loads(data.decode("utf-8-sig"))
        rows = {
            r["name"]: r
            for r in db.execute(
                "SELECT name, max_attempts, concurrency_key FROM task"
                " WHERE source = 'property' AND deleted_at IS NULL"
            )
        }
        assert set(rows) == set(document) - {"t"}
        for name in rows:
            given = document[name]
            assert rows[name]["max_attempts"] == given.get("max-attempts", 1)
            assert rows[name]["concurrency_key"] == given.get("concurrency-key")
    else:
        assert result.code == 2, result
        assert result.err.startswith("error: "), result.err
        assert result.err.count("\n") == 1, result.err
        assert row_counts(db) == before
    delete_all_but_t(with_task, db)
