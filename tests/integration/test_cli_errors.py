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
    assert result.err.startswith("error: cannot connect to the database at 127.0.0.1:1/app: ")
    assert result.err.count("\n") == 1
    assert "s3cret-pw" not in result.err + result.out


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("postgresql://admin:s3cr%00et@127.0.0.1:1/app", 2),  # libpq: forbidden value %00
        ("postgresql://admin:s3cr et@127.0.0.1:1/app", 2),  # libpq: unexpected spaces
        ("postgresql://admin:s3cr@et@127.0.0.1:1/app", 2),  # libpq: host 'et@127.0.0.1'
        ("host=127.0.0.1 port=1 dbname=app user=admin password='s3cr et'", 1),
        ("postgresql://admin@127.0.0.1:1/app?password=s3cr%20et", 1),
    ],
)
def test_no_form_of_a_password_in_the_url_is_echoed(cli, url: str, code: int) -> None:
    # On 646db2b each of these printed the password or a part of it: 's3cr%00et' in libpq's
    # message, the URL with 's3cr et' unmasked, 'et@127.0.0.1' as the host (issue 29).
    result = cli("tasks", "list", url=url)
    assert result.code == code, result.err
    assert result.err.count("\n") == 1
    for fragment in ("s3cr", "et@", "%00et", "s3cr et"):
        assert fragment not in result.err + result.out, result.err
    if code == 2:  # refused before anything could echo it
        assert "<unparseable database URL>" in result.err
    else:
        assert "127.0.0.1:1/app" in result.err


def test_a_log_line_that_carries_the_configured_password_masks_it_whatever_surrounds_it() -> None:
    from scheduler_daemon import logconfig
    from scheduler_daemon.settings import resolve_database_url

    url = "host=127.0.0.1 port=1 password='pass word!' user=u"
    assert resolve_database_url(url) == url  # remembers its password in every form
    masked = logconfig._redact(None, "", {"event": "x", "error": "said: pass word! (no)"})
    assert masked["error"] == "said: *** (no)"
    assert logconfig.scrub_text("a pass word! b") == "a *** b"


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
        check=False,
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
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert "--embedded" in helped.stdout
