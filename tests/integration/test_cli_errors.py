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


def test_run_off_a_terminal_without_a_url_is_refused_unless_embedded_is_asked_for(
    tmp_path,
) -> None:
    # On 646db2b a daemon started under systemd or Kubernetes with no URL (a typo in an
    # EnvironmentFile) silently started a private embedded server no peer could reach (issue 29).
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "SCHEDULER_DATABASE_URL"}
    env["SCHEDULER_EMBEDDED_DIR"] = str(tmp_path / "embedded")
    done = subprocess.run(
        [sys.executable, "-m", "scheduler_daemon", "run"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        "error: no database URL: set --database-url or SCHEDULER_DATABASE_URL (a fleet shares one"
        " server), or pass --embedded (SCHEDULER_EMBEDDED=1) for the embedded server"
    ]
    assert not (tmp_path / "embedded").exists()  # no server was started
    helped = subprocess.run(
        [sys.executable, "-m", "scheduler_daemon", "run", "--help"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert "--embedded" in helped.stdout
