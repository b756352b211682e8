"""The web console's HTTP tier, over the real ASGI app in-process and a real database: every
page renders with secrets masked and user strings escaped; an action is refused, changing no
row, without the CSRF token, on a read-only console, or without the operator's token or proxy
header; an allowed one goes through the CLI's Client calls (the same one-line refusals) and is
recorded in `operator_action`."""

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from starlette.testclient import TestClient

from scheduler_daemon.client import Client
from scheduler_daemon.console.app import HTMX, build_app
from scheduler_daemon.console.guard import Guard
from scheduler_daemon.domain.task import TaskSpec
from tests.console_process import BASE, Browser, message, script_sources
from tests.support import shell_task

TOKEN = "console-test-token-5c1e"
SCRIPT = "<script>alert(1)</script>"
DB_PASSWORD = "db-pass-8e1f"  # in the console's database URL (trust auth ignores it)


@pytest.fixture
def open_console(database_url: str) -> Iterator[Any]:
    """`open_console(writes=..., token=..., trust_header=...)`: a Browser over the app."""
    made: list[tuple[Client, TestClient]] = []

    def make(*, writes: bool = True, token: str | None = TOKEN, trust_header: str | None = None):
        client = Client(_with_password(database_url))
        guard = Guard(writes=writes, token=token, trust_header=trust_header)
        http = TestClient(build_app(client, guard), base_url=BASE, follow_redirects=False)
        made.append((client, http))
        return Browser(http)

    yield make
    for client, http in made:
        http.close()
        client.close()


def _with_password(url: str) -> str:
    scheme, rest = url.split("://", 1)
    user, host = rest.split("@", 1)
    return f"{scheme}://{user.split(':')[0]}:{DB_PASSWORD}@{host}"


def _state(db: Any) -> dict[str, Any]:
    """What an action could change: occurrences, task pause flags, the action record."""
    return {
        "occurrences": db.execute("SELECT id, status FROM occurrence ORDER BY id").fetchall(),
        "paused": db.execute("SELECT id, paused FROM task ORDER BY id").fetchall(),
        "actions": db.execute("SELECT count(*) AS n FROM operator_action").fetchone()["n"],
    }


def test_every_page_shows_no_secret_header_url_password_or_database_url(
    open_console, client, db, database_url
) -> None:
    web = client.add_task(
        TaskSpec(
            name="web",
            executor="http",
            target="https://user:hunter2-url@example.com/hook",
            headers=(("Authorization", "Bearer sekrit-header-value"), ("X-Api-Key", "k3y-val")),
            every=timedelta(hours=1),
        )
    )
    job = shell_task(client, "job")
    occurrence = client.trigger(web.id, requested_by="test")
    browser = open_console()
    assert browser.sign_in(TOKEN).status_code == 303
    browser.post(f"/tasks/{job.id}/pause")  # an action recorded, shown on the fleet page
    pages = [
        "/",
        "/tasks",
        "/tasks?prefix=w",
        "/tasks?verdict=healthy",
        f"/tasks/{web.id}",
        f"/tasks/{job.id}",
        "/running",
        f"/occurrences/{occurrence.id}",
        "/audit?since=15m",
        "/login",
    ]
    secrets = ["hunter2-url", "sekrit-header-value", "k3y-val", DB_PASSWORD, database_url]
    for path in pages:
        page = browser.get(path)
        assert page.status_code == 200, (path, page.text)
        for secret in secrets:
            assert secret not in page.text, (path, secret)
    task_page = browser.get(f"/tasks/{web.id}").text
    assert "https://user:***@example.com/hook" in task_page  # masked as `tasks export` does
    assert "Authorization: ***" in task_page


def test_a_script_in_a_task_name_or_command_renders_as_text(open_console, client) -> None:
    task = shell_task(client, SCRIPT, command=f"echo '{SCRIPT}'")
    client.trigger(task.id, requested_by=SCRIPT)
    browser = open_console()
    browser.sign_in(TOKEN)
    browser.post(f"/tasks/{task.id}/pause")
    for path in ["/", "/tasks", f"/tasks/{task.id}", "/running", "/occurrences/1"]:
        html = browser.get(path).text
        assert SCRIPT not in html, path
        if path != "/running":  # nothing runs: no daemon here
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html, path
        # the one script element of every page is the vendored htmx, served from the package
        assert script_sources(html) == [f"/static/{HTMX}"], path
    htmx = browser.get(f"/static/{HTMX}")
    assert htmx.status_code == 200
    assert 'version:"2.0.11"' in htmx.text


def test_a_post_to_a_read_only_console_is_refused_and_changes_nothing(
    open_console, client, db
) -> None:
    task = shell_task(client, "job")
    browser = open_console(writes=False, token=TOKEN)
    assert browser.sign_in(TOKEN).status_code == 401  # no sign-in where nothing can be done
    before = _state(db)
    for action in ("trigger", "pause", "resume"):
        page = browser.post(f"/tasks/{task.id}/{action}")
        assert page.status_code == 403
        assert message(page.text).startswith("refused: this console is read-only")
    assert "Trigger now" not in browser.get(f"/tasks/{task.id}").text  # no action offered
    assert _state(db) == before


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(
    open_console, client, db
) -> None:
    task = shell_task(client, "job")
    browser = open_console()
    browser.sign_in(TOKEN)
    before = _state(db)
    missing = browser.post(f"/tasks/{task.id}/trigger", csrf=False)
    assert missing.status_code == 403
    assert "CSRF token is missing or wrong" in message(missing.text)
    # a token of the right shape that this process did not sign fails too
    forged = browser.post(f"/tasks/{task.id}/pause", {"csrf": "forged.0000"}, csrf=False)
    assert forged.status_code == 403
    assert "CSRF token is missing or wrong" in message(forged.text)
    # and a token another console minted (another process's key) fails
    other = open_console().csrf()
    cross = browser.post(f"/tasks/{task.id}/pause", {"csrf": other}, csrf=False)
    assert cross.status_code == 403
    assert _state(db) == before


def test_a_post_without_the_token_is_refused_and_changes_nothing(open_console, client, db) -> None:
    task = shell_task(client, "job")
    browser = open_console()
    before = _state(db)
    page = browser.post(f"/tasks/{task.id}/trigger")
    assert page.status_code == 401
    assert message(page.text) == "refused: sign in with the console token first"
    wrong = browser.sign_in("not-the-token")
    assert wrong.status_code == 401
    assert browser.post(f"/tasks/{task.id}/pause").status_code == 401
    bearer = browser.post(f"/tasks/{task.id}/pause", Authorization="Bearer not-the-token")
    assert bearer.status_code == 401
    assert _state(db) == before
    # the right bearer token is an operator
    ok = browser.post(f"/tasks/{task.id}/pause", Authorization=f"Bearer {TOKEN}")
    assert ok.status_code == 200, ok.text
    assert db.execute("SELECT paused FROM task").fetchone()["paused"] is True


def test_behind_a_proxy_the_trusted_header_names_the_operator(open_console, client, db) -> None:
    task = shell_task(client, "job")
    browser = open_console(token=None, trust_header="X-Forwarded-User")
    before = _state(db)
    refused = browser.post(f"/tasks/{task.id}/trigger")
    assert refused.status_code == 401
    assert message(refused.text) == "refused: no X-Forwarded-User header from the proxy"
    assert _state(db) == before
    browser.http.headers["X-Forwarded-User"] = "alice"  # the proxy sets it on every request
    page = browser.post(f"/tasks/{task.id}/trigger")
    assert page.status_code == 200, page.text
    row = db.execute("SELECT actor, action, source FROM operator_action").fetchone()
    assert row == {"actor": "alice", "action": "trigger", "source": "console"}
    assert db.execute("SELECT requested_by FROM occurrence").fetchone()["requested_by"] == "alice"


def test_actions_refuse_as_the_cli_does_and_are_recorded(open_console, client, db, cli) -> None:
    task = shell_task(client, "job")  # --overlap forbid, the default
    browser = open_console()
    browser.sign_in(TOKEN)
    first = browser.post(f"/tasks/{task.id}/trigger")
    assert message(first.text) == "occurrence 1 queued"
    second = browser.post(f"/tasks/{task.id}/trigger")
    assert message(second.text) == "occurrence 2 skipped: overlap (an occurrence is active)"
    assert "error" in second.text.split('id="message"')[0][-20:]  # shown as a refusal
    assert message(browser.post(f"/tasks/{task.id}/pause").text) == "task 'job' paused"
    assert message(browser.post(f"/tasks/{task.id}/resume").text) == "task 'job' resumed"
    assert message(browser.post("/occurrences/1/cancel").text) == "occurrence 1 cancelled"
    again = browser.post("/occurrences/1/cancel")
    assert again.status_code == 409
    by_cli = cli("runs", "cancel", "--occurrence", "1")
    assert by_cli.code == 2
    assert message(again.text) == by_cli.err.strip()  # the CLI's one line, word for word
    missing = browser.post("/tasks/999/trigger")
    assert missing.status_code == 404
    assert message(missing.text) == cli("tasks", "trigger", "999").err.strip()
    rows = db.execute(
        "SELECT actor, action, source, task_id, occurrence_id FROM operator_action ORDER BY id"
    ).fetchall()
    actor = "console-token@testclient"
    assert rows == [
        {"actor": actor, "action": "trigger", "source": "console", "task_id": task.id,
         "occurrence_id": 1},
        {"actor": actor, "action": "trigger", "source": "console", "task_id": task.id,
         "occurrence_id": 2},
        {"actor": actor, "action": "pause", "source": "console", "task_id": task.id,
         "occurrence_id": None},
        {"actor": actor, "action": "resume", "source": "console", "task_id": task.id,
         "occurrence_id": None},
        {"actor": actor, "action": "cancel", "source": "console", "task_id": task.id,
         "occurrence_id": 1},
    ]  # fmt: skip
    shown = browser.get(f"/tasks/{task.id}").text.split('class="actions-log"')[1]
    assert shown.count(actor) == 5


def test_a_backfill_is_a_dry_run_first_then_queued_on_confirm(open_console, client, db) -> None:
    task = client.add_task(
        TaskSpec(name="hourly", executor="shell", target="true", cron="0 * * * *")
    )
    browser = open_console()
    browser.sign_in(TOKEN)
    window = {"from": "2026-01-01T00:00", "to": "2026-01-01T03:00"}
    dry = browser.post(f"/tasks/{task.id}/backfill", window)
    assert message(dry.text) == "dry run: 4 of 4 firings would be queued for task hourly"
    assert 'id="confirm-backfill"' in dry.text
    assert db.execute("SELECT count(*) AS n FROM occurrence").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM operator_action").fetchone()["n"] == 0
    done = browser.post(f"/tasks/{task.id}/backfill", {**window, "confirm": "yes"})
    assert message(done.text).startswith("queued 4 backfill occurrence(s) of task hourly")
    assert db.execute("SELECT count(*) AS n FROM occurrence").fetchone()["n"] == 4
    bad = browser.post(f"/tasks/{task.id}/backfill", {"from": "yesterday", "to": "x"})
    assert bad.status_code == 409
    assert message(bad.text) == (
        "error: from 'yesterday' is not an ISO 8601 instant such as 2030-01-01T09:00"
    )
    rows = db.execute("SELECT action, detail FROM operator_action").fetchall()
    assert [r["action"] for r in rows] == ["backfill"]


def test_the_task_page_shows_next_firings_in_zone_and_utc_with_dst_notes(
    open_console, client
) -> None:
    task = client.add_task(
        TaskSpec(
            name="daily",
            executor="shell",
            target="true",
            cron="30 9 * * *",
            timezone="Europe/Berlin",
        )
    )
    html = open_console().get(f"/tasks/{task.id}").text
    assert "at 09:30 every day (Europe/Berlin)" in html
    rows = html.split('id="next-firings"')[1].split("</table>")[0]
    assert rows.count("<tr><td>") == 10
    assert "T09:30:00+01:00" in rows or "T09:30:00+02:00" in rows
    assert "T08:30:00+00:00" in rows or "T07:30:00+00:00" in rows


def test_the_console_acts_with_its_roles_grants_and_shows_the_databases_refusal(
    database_url, client, db
) -> None:
    from tests.role_fleet import role_fleet

    task = shell_task(client, "job")
    with role_fleet(database_url) as roles:
        for url, expected in [
            (roles.reader, "error: database refused: permission denied for table task"),
            (roles.operator, "task 'job' paused"),
        ]:
            with Client(url) as console_client:
                guard = Guard(writes=True, token=TOKEN, trust_header=None)
                with TestClient(build_app(console_client, guard), base_url=BASE) as http:
                    browser = Browser(http)
                    assert browser.get(f"/tasks/{task.id}").status_code == 200  # reads: both
                    browser.sign_in(TOKEN)
                    page = browser.post(f"/tasks/{task.id}/pause")
                    assert message(page.text) == expected
        rows = db.execute("SELECT actor, action FROM operator_action").fetchall()
        assert rows == [{"actor": "console-token@testclient", "action": "pause"}]


def test_an_action_whose_record_is_refused_is_rolled_back_and_the_refusal_shown(
    open_console, client, db
) -> None:
    # Fails on the build that recorded after the action committed: there the pause and the
    # trigger stood and the page only added "(not recorded: ...)".
    task = shell_task(client, "job")
    db.execute("ALTER TABLE operator_action ADD CONSTRAINT refuse_all CHECK (false) NOT VALID")
    browser = open_console()
    browser.sign_in(TOKEN)
    before = _state(db)
    for path in [f"/tasks/{task.id}/trigger", f"/tasks/{task.id}/pause"]:
        page = browser.post(path)
        assert page.status_code == 503, path
        line = message(page.text)
        assert line.startswith("error: database error: "), path
        assert "refuse_all" in line, path
        assert "\n" not in line, path
        assert _state(db) == before, path


def test_the_task_page_shows_each_next_firings_spread_start_as_tasks_next_does(
    open_console, client, cli
) -> None:
    # Fails on the page that showed the nominal times only (no spread start column).
    task = client.add_task(
        TaskSpec(
            name="spread",
            executor="shell",
            target="true",
            cron="0 * * * *",
            timezone="Europe/Berlin",
            spread=timedelta(minutes=20),
        )
    )
    html = open_console().get(f"/tasks/{task.id}").text
    table = html.split('id="next-firings"')[1].split("</table>")[0]
    shown = [cell.split("</td>")[0] for cell in table.split('<td class="spread-start">')[1:]]
    result = cli("tasks", "next", "spread", "-n", "10", "--json")
    assert result.code == 0
    expected = [row["start_local"] for row in json.loads(result.out)]
    assert len(expected) == 10
    assert shown == expected
    assert any(s != row["local"] for s, row in zip(shown, json.loads(result.out), strict=True))


def test_the_task_page_skips_excluded_firings_and_says_why_as_tasks_next_does(
    open_console, client, cli, db
) -> None:
    # Fails on the page that listed the schedule's fire times: there the first two rows were
    # the excluded 09:30s of the next two dates in Berlin, and no row said why any was missing.
    today = db.execute("SELECT (now() AT TIME ZONE 'Europe/Berlin')::date AS d").fetchone()["d"]
    span = f"{today}..{today + timedelta(days=2)}"  # today and the next two dates, in Berlin
    assert cli("calendars", "add", "holidays", "--range", span).code == 0
    assert cli("calendars", "add", "other", "--date", str(today + timedelta(days=5))).code == 0
    task = client.add_task(
        TaskSpec(
            name="daily",
            executor="shell",
            target="true",
            cron="30 9 * * *",
            timezone="Europe/Berlin",
            exclude_calendars=("holidays", "other"),
        )
    )
    html = open_console().get(f"/tasks/{task.id}").text
    table = html.split('id="next-firings"')[1].split("</table>")[0]
    assert "<th>Excluded before it</th>" in table
    rows = table.split("<tr><td>")[1:]
    shown = [
        (r.split("</td>")[0], r.split('<td class="excluded">')[1].split("</td>")[0]) for r in rows
    ]
    listed = cli("tasks", "next", "daily", "-n", "10", "--json").json()
    assert [local for local, _ in shown] == [row["local"] for row in listed]
    assert shown[0][0].startswith(str(today + timedelta(days=3)))
    assert str(today + timedelta(days=5)) not in table  # the other calendar's date: passed over
    # The reason, word for word as `tasks next` says it below its table, beside the firing
    # each run of excluded firings comes before; nothing beside the others.
    early = db.execute(
        "SELECT (now() AT TIME ZONE 'Europe/Berlin')::time < '09:30' AS early"
    ).fetchone()["early"]
    held = 3 if early else 2  # today's 09:30 too, while it is still ahead
    text = cli("tasks", "next", "daily", "-n", "1").out.splitlines()[-1]
    assert text == f"passed over {held} excluded firing(s) on dates of calendar(s) holidays"
    assert shown[0][1] == text
    assert shown[2][1] == "passed over 1 excluded firing(s) on dates of calendar(s) other"
    assert [why for _, why in shown[1:2] + shown[3:]] == [""] * 8
    assert [row["excluded_before"] for row in listed[:4]] == [held, 0, 1, 0]


def test_a_pause_until_takes_the_clis_end_and_refusals_and_the_page_shows_the_resume(
    open_console, client, db, cli
) -> None:
    task = shell_task(client, "job")
    browser = open_console()
    browser.sign_in(TOKEN)
    before = _state(db)
    # Refused as `tasks pause --until` refuses, word for word, and nothing is written: not an
    # instant nor a duration, no offset, in the past (database clock).
    for until in ("tomorrow", "2099-01-01T00:00:00", "-5m"):
        page = browser.post(f"/tasks/{task.id}/pause", {"until": until})
        assert page.status_code == 409, until
        assert message(page.text) == cli("tasks", "pause", "job", "--until", until).err.strip()
    past = browser.post(f"/tasks/{task.id}/pause", {"until": "2020-01-01T00:00:00Z"})
    assert past.status_code == 409
    assert message(past.text).startswith(
        "error: --until 2020-01-01T00:00:00+00:00 is not after now ("
    )
    assert _state(db) == before

    # Accepted: an instant with an offset, then (resumed) a duration from the database's now.
    done = browser.post(f"/tasks/{task.id}/pause", {"until": "2099-01-01T09:00:00+02:00"})
    assert done.status_code == 200, done.text
    row = db.execute("SELECT paused, paused_until FROM task").fetchone()
    assert row["paused"] is True
    assert row["paused_until"] == datetime(2099, 1, 1, 7, tzinfo=UTC)
    assert message(done.text) == f"task 'job' paused until {row['paused_until'].isoformat()}"
    page = browser.get(f"/tasks/{task.id}").text
    assert f"resumes at {row['paused_until'].isoformat()}" in page
    assert browser.post(f"/tasks/{task.id}/resume").status_code == 200
    assert 'id="pending-resume"' not in browser.get(f"/tasks/{task.id}").text
    db_now = db.execute("SELECT now() AS n").fetchone()["n"]
    browser.post(f"/tasks/{task.id}/pause", {"until": "PT2H"})
    until = db.execute("SELECT paused_until FROM task").fetchone()["paused_until"]
    assert db_now + timedelta(hours=2) <= until <= db_now + timedelta(hours=2, minutes=1)
    # An empty end is a plain pause: it clears the pending one, as `tasks pause` does.
    browser.post(f"/tasks/{task.id}/resume")
    assert message(browser.post(f"/tasks/{task.id}/pause", {"until": " "}).text) == (
        "task 'job' paused"
    )
    assert db.execute("SELECT paused_until FROM task").fetchone()["paused_until"] is None
    rows = db.execute("SELECT action, detail FROM operator_action ORDER BY id").fetchall()
    assert [(r["action"], (r["detail"] or "")[:6]) for r in rows] == [
        ("pause", "until "),
        ("resume", ""),
        ("pause", "until "),
        ("resume", ""),
        ("pause", ""),
    ]
