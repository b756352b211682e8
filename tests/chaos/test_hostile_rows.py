"""Real daemons beside rows written behind the checks (issue 44): arguments nested 1,000 deep on
a triggered occurrence, an http URL `urlsplit` refuses, a cron that does not parse. Two daemons
run for about 20 s beside an every-second task: neither exits, the every-second task runs nearly
every firing (no `skipped: overlap` storm from runs left `running` by a crashed pass), each
hostile row carries its error where an operator sees it, and `audit` finds no violation.

On 61278d7 the deep arguments raised RecursionError in the claim after it committed its batch
`running`, every pass of whichever daemon claimed it, and each daemon exited 3 in turn; the bad
URL crashed every launch pass that claimed it (the issue measured 6 of 21 firings of a healthy
every-3 s task run, 15 `skipped: overlap`)."""

import time

import pytest

from tests.support import query, wait_for

pytestmark = pytest.mark.slow

RUN_SECONDS = 20
DEEP_ARGS = "(repeat('{\"a\": ', 1000) || '1' || repeat('}', 1000))::jsonb"


def _errors(url: str, name: str) -> list[str]:
    """The errors an operator sees about task `name`: its park error, its runs' errors."""
    rows = query(
        url,
        "SELECT park_error AS e FROM task WHERE name = %(n)s UNION ALL"
        " SELECT r.error FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
        " JOIN task t ON t.id = o.task_id WHERE t.name = %(n)s",
        {"n": name},
    )
    return [r["e"] for r in rows if r["e"]]


def test_hostile_rows_neither_stop_a_daemon_nor_slow_an_unrelated_every_second_task(
    spawn, cli, database_url
) -> None:
    for name, *definition in (
        ("steady", "--every", "1s", "--command", "true"),
        ("deep-args", "--every", "1h", "--command", "true"),
        ("bad-url", "--every", "1s", "--overlap", "allow", "--http", "http://127.0.0.1:9/h"),
        ("bad-cron", "--cron", "* * * * *", "--command", "true"),
    ):
        added = cli("tasks", "add", name, *definition)
        assert added.code == 0, added.err
    triggered = cli("tasks", "trigger", "deep-args", "--json")
    assert triggered.code == 0, triggered.err
    query(
        database_url,
        f"UPDATE occurrence SET args = {DEEP_ARGS} WHERE id = %s",
        (triggered.json()["id"],),
    )
    query(
        database_url,
        "UPDATE task SET payload = '{\"url\": \"http://[::1/hook\"}' WHERE name = 'bad-url';"
        "UPDATE task SET cron_expr = 'not a cron', next_run_at = now() WHERE name = 'bad-cron'",
    )
    daemons = [spawn(database_url, f"d{i}", "--max-failed-passes", "2") for i in range(2)]
    for daemon in daemons:
        daemon.instance_id()
    # Firings due before both daemons ran are a start's catch-up (coalesced, one skipped as an
    # overlap of the first): the rate is judged from here.
    (since,) = query(database_url, "SELECT now() AS t")
    time.sleep(RUN_SECONDS)  # the load runs its course; the verdict comes from the history
    for daemon in daemons:
        assert daemon.proc.poll() is None, daemon.log()
        assert '"pass_crashed"' not in daemon.log()
    (steady,) = query(
        database_url,
        "SELECT count(*) FILTER (WHERE o.status = 'success') AS ran,"
        " floor(extract(epoch FROM now() - %(since)s)) AS due"
        " FROM occurrence o JOIN task t ON t.id = o.task_id"
        " WHERE t.name = 'steady' AND o.scheduled_for > %(since)s",
        {"since": since["t"]},
    )
    skipped = query(
        database_url,
        "SELECT o.reason, o.firing_count FROM occurrence o JOIN task t ON t.id = o.task_id"
        " WHERE t.name = 'steady' AND o.status = 'skipped' AND o.scheduled_for > %s",
        (since["t"],),
    )
    assert skipped == [], (steady, skipped)
    assert steady["ran"] >= steady["due"] - 2, steady  # the newest may still run
    assert wait_for(lambda: _errors(database_url, "deep-args"), timeout=10) == [
        "arguments unreadable: JSON nested 1000 levels deep; at most 32"
    ]
    # The http executor refuses the URL itself, in one line (issue 44 item 2).
    assert set(_errors(database_url, "bad-url")) == {
        "the payload's url is not a valid URL (Invalid IPv6 URL), got 'http://[::1/hook'"
    }
    assert _errors(database_url, "bad-cron")[0].startswith("invalid cron expression")
    for daemon in daemons:
        assert daemon.stop() == 0
    audit = cli("audit")
    assert audit.code == 0, audit.out + audit.err
