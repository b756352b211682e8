"""Every value is bounded where it enters (docs/cli.md "Limits"), and every bad one is refused
cleanly: one `error:` line on stderr, exit 2, nothing written. One test per finding of issue 28
(parts 2 and 4); each failed on 646db2b, the commit before the bounds (noted per test)."""

from pathlib import Path

import pytest

from tests.support import EVERY_MINUTE, launched_shell_run

pytestmark = pytest.mark.smoke

SHELL = ("--every", "1m", "--command", "true")
INT4_OVER = str(2**31)
INT8_OVER = str(2**63)


def refused(result, message: str = "") -> None:
    """One `error:` line, exit 2, no traceback."""
    assert result.code == 2, result
    assert result.err.startswith("error: "), result.err
    assert result.err.count("\n") == 1, result.err
    assert "Traceback" not in result.err
    assert message in result.err, result.err


def write(tmp_path: Path, body: str | bytes) -> str:
    path = tmp_path / "tasks.toml"
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    return str(path)


# -- part 2: settings that were accepted and then stopped every daemon (exit 3) --------------


def test_max_concurrent_runs_past_100000_is_refused(cli, counts) -> None:
    # 646db2b: accepted 2147483648, which overflowed the claim's ::int in every daemon.
    before = counts()
    refused(cli("config", "set", "max-concurrent-runs", INT4_OVER), "at most 100,000")
    refused(cli("config", "set", "max-concurrent-runs", "100001"), "at most 100,000")
    assert counts() == before
    assert cli("config", "set", "max-concurrent-runs", "100000").code == 0
    assert cli("config", "show", "--json").json()["max-concurrent-runs"] == 100_000


def test_a_fleet_history_retention_past_100_years_is_refused(cli, counts) -> None:
    # 646db2b: accepted 999999999d; every prune then failed with `timestamp out of range`.
    before = counts()
    refused(cli("config", "set", "history-retention", "999999999d"), "at most 100 years")
    refused(cli("config", "set", "history-retention", "36526d"), "at most 100 years")
    # 100 years itself is more than 1,000 partitions of even the longest interval (31 days,
    # issue 47: planning and relcache cost grow with the partitions): refused too, by that rule.
    refused(cli("config", "set", "history-retention", "36525d"), "more than 1,000")
    assert counts() == before
    assert cli("config", "set", "history-retention", "1000d").code == 0  # daily partitions
    assert cli("config", "set", "history-partition-interval", "31d").code == 0
    assert cli("config", "set", "history-retention", "31000d").code == 0


def test_a_task_history_retention_past_100_years_is_refused(cli, counts, tmp_path) -> None:
    # 646db2b: `--history-retention 2500000d` was accepted (prune: timestamp out of range).
    before = counts()
    refused(cli("tasks", "add", "t", *SHELL, "--history-retention", "2500000d"), "100 years")
    file = write(tmp_path, '[t]\ncommand = "true"\nevery = "1m"\nhistory-retention = "2500000d"\n')
    refused(cli("tasks", "apply", "-f", file), "100 years")
    assert counts() == before


def test_a_concurrency_key_past_200_characters_is_refused(cli, counts, tmp_path) -> None:
    # 646db2b: an 8,000-character key was accepted (past the btree row limit: every dispatch
    # pass failed), by `tasks add` and by `tasks apply`.
    before = counts()
    key = "k" * 8000
    refused(cli("tasks", "add", "t", *SHELL, "--concurrency-key", key), "1 to 200 characters")
    file = write(tmp_path, f'[t]\ncommand = "true"\nevery = "1m"\nconcurrency-key = "{key}"\n')
    refused(cli("tasks", "apply", "-f", file), "1 to 200 characters")
    assert counts() == before
    assert cli("tasks", "add", "t", *SHELL, "--concurrency-key", "k" * 200).code == 0


@pytest.mark.parametrize(
    "option", ["--every", "--timeout", "--start-deadline", "--catchup-window", "--backoff"]
)
def test_every_task_duration_is_at_most_100_years_and_at_least_1ms(cli, counts, option) -> None:
    # 646db2b: `--every 999999999d` was accepted and never fired; the others likewise unbounded.
    args = SHELL if option != "--every" else ("--command", "true")
    before = counts()
    refused(cli("tasks", "add", "t", *args, option, "999999999d"), "at most 100 years")
    refused(cli("tasks", "add", "t", *args, option, "0.5ms"), "at least 1ms")
    assert counts() == before
    assert cli("tasks", "add", "t", *args, option, "36525d").code == 0


def test_misfire_grace_is_bounded_too(cli, counts) -> None:
    before = counts()
    refused(cli("tasks", "add", "t", *SHELL, "--misfire-grace", "36526d"), "at most 100 years")
    assert counts() == before


# -- part 4: refusals that were tracebacks --------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("every = nan", "finite number of seconds"),
        ("every = inf", "finite number of seconds"),
        ("every = 1e20", "at most 100 years"),
    ],
)
def test_a_non_finite_or_huge_number_of_seconds_in_a_task_file_is_refused(
    cli, counts, tmp_path, line, message
) -> None:
    # 646db2b: ValueError / OverflowError tracebacks, exit 1.
    before = counts()
    refused(cli("tasks", "apply", "-f", write(tmp_path, f'[t]\ncommand = "x"\n{line}\n')), message)
    assert counts() == before


def test_a_deeply_nested_task_file_is_refused(cli, counts, tmp_path) -> None:
    # 646db2b: RecursionError traceback.
    before = counts()
    deep = write(tmp_path, "x = " + "[" * 5000 + "]" * 5000 + "\n")
    refused(cli("tasks", "apply", "-f", deep), "nested more than 100")
    just_over = '[t]\ncommand = "x"\nevery = "1m"\ny = ' + "[" * 100 + "]" * 100 + "\n"
    refused(cli("tasks", "apply", "-f", write(tmp_path, just_over)), "nested more than 100")
    assert counts() == before


def test_a_task_file_that_is_not_utf8_is_refused(cli, counts, tmp_path) -> None:
    # 646db2b: UnicodeDecodeError traceback.
    before = counts()
    file = write(tmp_path, b'[t]\ncommand = "\xff"\nevery = "1m"\n')
    refused(cli("tasks", "apply", "-f", file), "not UTF-8: byte 0xff at offset 15")
    assert counts() == before


def test_a_task_file_past_10_mib_is_refused(cli, counts, tmp_path) -> None:
    before = counts()
    file = write(tmp_path, b"# " + b"x" * (10 * 1024 * 1024) + b"\n")
    refused(cli("tasks", "apply", "-f", file), "larger than 10 MiB")
    assert counts() == before


def test_an_at_past_what_a_timestamp_holds_is_refused(cli, counts) -> None:
    # 646db2b: OverflowError traceback (9999-12-31T23:59:59-14:00 is past year 9999 in UTC).
    before = counts()
    refused(cli("tasks", "add", "t", "--at", "9999-12-31T23:59:59-14:00", "--command", "x"))
    refused(cli("tasks", "add", "t", "--at", "2300-01-01T00:00Z", "--command", "x"), "100 years")
    assert counts() == before


@pytest.mark.parametrize("value", ["²", "٣", "1²"])
def test_config_set_with_a_digit_other_than_0_to_9_is_refused(cli, counts, value) -> None:
    # 646db2b: `²` passed str.isdigit, then int() raised: a traceback.
    before = counts()
    refused(cli("config", "set", "max-concurrent-runs", value), "whole number")
    refused(cli("config", "set", "history-retention", value), "invalid duration")
    assert counts() == before


def test_a_task_ref_that_no_task_can_have_is_unknown(cli, counts) -> None:
    # 646db2b: `tasks show ²` was a traceback, `tasks show 2^63` a database error (exit 1).
    cli("tasks", "add", "t", *EVERY_MINUTE)
    before = counts()
    for ref in ("²", INT8_OVER, "a\x00b"):
        for command in (("show",), ("pause",), ("next",), ("trigger",), ("delete",)):
            refused(cli("tasks", *command, ref), "unknown task")
        refused(cli("runs", "list", "--task", ref), "unknown task")
    assert counts() == before


# -- part 4: refusals that were `database error`, exit 1 ------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("tasks", "add", "t", *SHELL, "--max-attempts", INT4_OVER),
        ("tasks", "add", "t", *SHELL, "--catchup-limit", INT4_OVER),
        ("tasks", "list", "--limit", INT8_OVER),
        ("runs", "list", "--limit", INT8_OVER),
        ("runs", "list", "--after", INT8_OVER),
        ("runs", "list", "--after", f"1:{INT8_OVER}"),
    ],
)
def test_an_integer_past_its_column_is_refused_before_the_database(cli, counts, args) -> None:
    # 646db2b: `error: database error: integer out of range` / `bigint out of range`, exit 1.
    before = counts()
    refused(cli(*args))
    assert counts() == before


def test_tasks_update_refuses_an_integer_past_int4(cli, counts) -> None:
    cli("tasks", "add", "t", *SHELL)
    before = counts()
    refused(cli("tasks", "update", "t", "--max-attempts", INT4_OVER), "at most 2,147,483,647")
    assert counts() == before


@pytest.mark.parametrize(
    "args",
    [
        ("tasks", "add", "a\x00b", *SHELL),
        ("tasks", "add", "t", "--every", "1m", "--command", "tr\x00ue"),
        ("tasks", "add", "t", "--every", "1m", "--http", "http://x/\x00"),
        ("tasks", "add", "t", *SHELL, "--concurrency-key", "a\x00b"),
        ("tasks", "list", "--prefix", "a\x00b"),
        ("tasks", "list", "--after", "a\x00b"),
    ],
)
def test_a_nul_is_refused_before_the_database(cli, counts, args) -> None:
    # 646db2b: `error: database error: ... cannot contain NUL (0x00) bytes`, exit 1.
    before = counts()
    refused(cli(*args))
    assert counts() == before


def test_a_nul_in_a_task_file_or_its_source_is_refused(cli, counts, tmp_path) -> None:
    # 646db2b: database errors, exit 1.
    before = counts()
    named = write(tmp_path, '["a\\u0000b"]\ncommand = "true"\nevery = "1m"\n')
    refused(cli("tasks", "apply", "-f", named), "U+0000")
    plain = write(tmp_path, '[t]\ncommand = "true"\nevery = "1m"\n')
    refused(cli("tasks", "apply", "-f", plain, "--source", "s\x00"), "--source")
    assert counts() == before


# -- part 4: what was accepted or printed and should not have been --------------------------


@pytest.mark.parametrize("name", ["a\x01b", "a\nb", "a\x1b[2Jb", "a\u200bb", "a\u202eb", "a\x7f"])
def test_a_task_name_with_a_control_or_format_character_is_refused(
    cli, counts, tmp_path, name
) -> None:
    # 646db2b: accepted, and then printed raw by every listing.
    before = counts()
    refused(cli("tasks", "add", name, *SHELL), "control or format character U+")
    escaped = name.encode("unicode_escape").decode().replace('"', '\\"')
    refused(cli("tasks", "apply", "-f", write(tmp_path, f'["{escaped}"]\ncommand = "x"\n')))
    assert counts() == before


def test_job_output_and_error_are_printed_with_control_characters_escaped(  # noqa: PLR0917 - fixtures
    client, pool, executors, database_url, db, cli
) -> None:
    # 646db2b: `runs show` and `runs list` wrote the bytes as they were: a job could clear the
    # screen or retitle the terminal of whoever read its history.
    launched = launched_shell_run(client, pool, executors, database_url, name="noisy")
    (run,) = launched.replica.finished()
    launched.replica.completer.complete(run)
    db.execute(
        "UPDATE run SET output_tail = %s, error = %s",
        ("line 1\n\x1b[2Jcleared\tok\u202e", "bad\x1b]0;title\x07\r\nmore"),
    )
    shown = cli("runs", "show", str(run.run_id))
    assert shown.code == 0, shown.err
    for raw in ("\x1b", "\x07", "\u202e", "\r"):
        assert raw not in shown.out
    assert "line 1\n\\x1b[2Jcleared\tok\\u202e" in shown.out  # newline and tab kept
    assert "bad\\x1b]0;title\\x07\\r\nmore" in shown.out
    listed = cli("runs", "list")
    assert listed.code == 0, listed.err
    for raw in ("\x1b", "\r"):
        assert raw not in listed.out
    as_json = cli("runs", "show", str(run.run_id), "--json").json()
    assert as_json["output_tail"] == "line 1\n\x1b[2Jcleared\tok\u202e"  # JSON: as it is


def test_tasks_next_n_is_at_most_10000(cli) -> None:
    # 646db2b: unbounded: -n 2147483648 ran until it was killed.
    cli("tasks", "add", "t", *EVERY_MINUTE)
    refused(cli("tasks", "next", "t", "-n", "10001"), "-n must be 1 to 10,000")
    refused(cli("tasks", "next", "t", "-n", INT8_OVER), "-n must be 1 to 10,000")
    assert len(cli("tasks", "next", "t", "-n", "10000", "--json").json()) == 10_000


def test_a_byte_order_mark_at_the_start_of_a_task_file_is_accepted(cli, tmp_path) -> None:
    # 646db2b: `error: not a valid TOML file: Invalid statement (at line 1, column 1)`.
    file = write(tmp_path, b'\xef\xbb\xbf[t]\ncommand = "true"\nevery = "1m"\n')
    applied = cli("tasks", "apply", "-f", file)
    assert applied.code == 0, applied.err
    assert cli("tasks", "show", "t", "--json").json()["name"] == "t"


def test_an_error_message_quoting_a_line_break_stays_one_line(cli) -> None:
    refused(cli("config", "set", "no\nsuch", "1"), "unknown setting 'no\\nsuch'")
