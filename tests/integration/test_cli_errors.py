"""What every command does with a name or argument it refuses and a database it cannot use:
one line on stderr, the documented exit code, nothing written."""

import pytest

pytestmark = pytest.mark.smoke


@pytest.mark.parametrize(
    "command",
    [
        ("tasks", "show"),
        ("tasks", "pause"),
        ("tasks", "resume"),
        ("tasks", "trigger"),
        ("tasks", "delete"),
        ("tasks", "next"),
        ("tasks", "update"),
    ],
)
def test_an_unknown_task_is_one_line_and_exit_2(cli, counts, command) -> None:
    before = counts()
    extra = ("--overlap", "allow") if command[1] == "update" else ()
    result = cli(*command, "nosuch", *extra)
    assert (result.code, result.err) == (2, "error: unknown task 'nosuch'\n")
    assert counts() == before


def test_bad_runs_and_config_arguments_are_refused(cli, counts) -> None:
    before = counts()
    assert cli("runs", "list", "--status", "weird").code == 2
    assert cli("runs", "list", "--task", "nosuch").err == "error: unknown task 'nosuch'\n"
    assert cli("runs", "show", "999").err == "error: unknown run 999\n"
    assert cli("config", "set", "max-concurrent-runs", "0").code == 2
    assert cli("config", "set", "nonsense", "1").code == 2
    assert counts() == before


def test_an_unreachable_database_is_exit_1_and_one_line_without_the_password(cli) -> None:
    result = cli("tasks", "list", url="postgresql://admin:s3cret-pw@127.0.0.1:1/app")
    assert result.code == 1
    assert result.err.startswith("error: cannot connect to the database at postgresql://admin:***@")
    assert result.err.count("\n") == 1
    assert "s3cret-pw" not in result.err + result.out


def test_commands_on_an_unmigrated_database_say_so_in_one_line(cli, empty_database_url) -> None:
    result = cli("tasks", "list", url=empty_database_url)
    assert (result.code, result.err) == (
        1,
        "error: the database has no scheduler-daemon schema: run `scheduler-daemon migrate`\n",
    )
