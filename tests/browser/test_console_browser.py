"""The web console in a real browser (headless chromium) against a real console process, a real
daemon process and a real database: a task appears with its next firing; triggering it shows
its run appear and finish without a reload (htmx); pausing it, and pausing it until an end
(a past one refused, then the pending resume shown); refused actions (writes off, a
`forbid` task already running) show their one-line reason. Screenshots are saved under each
test's tmp dir (`screenshots/`)."""

from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from tests.console_process import ConsoleProcess
from tests.support import query, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.browser]
TOKEN = "browser-token-7d2c"


def _until(driver: Any, predicate: Any, timeout: float = 30.0) -> Any:
    """Polls `predicate(driver)`; an element htmx swapped out meanwhile is looked up again."""
    wait = WebDriverWait(
        driver, timeout, poll_frequency=0.1, ignored_exceptions=[StaleElementReferenceException]
    )
    return wait.until(predicate)


def _text(driver: Any, css: str) -> str:
    """An element's text, read again if the live region was swapped while reading it."""
    return _until(driver, lambda d: d.find_element(By.CSS_SELECTOR, css).text or " ").strip()


def _click(driver: Any, label: str) -> None:
    driver.find_element(By.XPATH, f"//button[normalize-space()='{label}']").click()


def _sign_in(driver: Any, base: str) -> None:
    driver.get(base + "/login")
    driver.find_element(By.NAME, "token").send_keys(TOKEN)
    _click(driver, "Sign in")
    _until(driver, lambda d: d.current_url == base + "/")


@pytest.fixture
def console(database_url: str, tmp_path: Path) -> Any:
    started: list[ConsoleProcess] = []

    def start(*args: str) -> ConsoleProcess:
        process = ConsoleProcess(database_url, tmp_path, *args, token=TOKEN)
        started.append(process)
        process.wait_ready()
        return process

    yield start
    for process in started:
        process.stop()


def test_trigger_a_task_watch_its_run_finish_then_pause_it(
    browser, console, cli, spawn, database_url
) -> None:
    cli("tasks", "add", "nightly-report", "--cron", "0 3 * * *", "--command", "sleep 0.3")
    web = console("--writes")
    browser.get(web.base + "/tasks")
    row = "//table[@id='tasks']//tr[td/a='nightly-report']/td[7]"
    next_firing = _until(browser, lambda d: d.find_element(By.XPATH, row).text)
    assert next_firing.endswith("T03:00:00+00:00")
    browser.shot("01-tasks")
    _until(browser, lambda d: d.find_element(By.LINK_TEXT, "nightly-report").click() or True)
    assert _text(browser, "#schedule-words") == "at 03:00 every day (UTC)"
    firings = _text(browser, "#next-firings").splitlines()[1:]
    assert len(firings) == 10
    assert firings[0].startswith(next_firing)
    browser.shot("02-task")

    _sign_in(browser, web.base)
    browser.get(web.base + "/tasks/1")
    _click(browser, "Trigger now")
    assert _text(browser, "#message") == "occurrence 1 queued"
    browser.shot("03-triggered")
    browser.find_element(By.ID, "back").click()
    # a real daemon runs it; the page's live region shows the run without a reload
    daemon = spawn(database_url, "browser")
    marker = browser.find_element(By.ID, "task-name")
    _until(
        browser,
        lambda d: "success" in d.find_element(By.CSS_SELECTOR, "table.history").text,
        timeout=60,
    )
    assert marker.is_displayed()  # the same document: htmx swapped the region, no reload
    history = _text(browser, "table.history")
    assert "manual" in history
    assert daemon.instance_id() in history  # the owner
    _until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#run-chart rect"))  # its run
    browser.shot("04-run-finished")

    _click(browser, "Pause")
    assert _text(browser, "#message") == "task 'nightly-report' paused"
    browser.find_element(By.ID, "back").click()
    assert browser.find_elements(By.XPATH, "//button[normalize-space()='Resume']")
    assert query(database_url, "SELECT paused FROM task") == [{"paused": True}]
    actions = query(database_url, "SELECT action FROM operator_action ORDER BY id")
    assert [a["action"] for a in actions] == ["trigger", "pause"]
    browser.shot("05-paused")

    # Resumed, then paused with an end: a past one is refused with the CLI's line; "1h" is
    # taken, and the task page shows when it resumes.
    _click(browser, "Resume")
    browser.find_element(By.ID, "back").click()
    browser.find_element(By.NAME, "until").send_keys("2020-01-01T00:00Z")
    _click(browser, "Pause")
    assert _text(browser, "#message").startswith(
        "error: --until 2020-01-01T00:00:00+00:00 is not after now ("
    )
    browser.find_element(By.ID, "back").click()
    browser.find_element(By.NAME, "until").send_keys("1h")
    _click(browser, "Pause")
    shown = _text(browser, "#message")
    (row,) = query(database_url, "SELECT paused_until FROM task")
    until = row["paused_until"].isoformat()
    assert shown == f"task 'nightly-report' paused until {until}"
    browser.find_element(By.ID, "back").click()
    assert _text(browser, "#pending-resume") == f"paused; resumes at {until} (database clock)"
    browser.shot("06-paused-until")
    browser.get(web.base + "/")
    assert daemon.instance_id() in _text(browser, "#instances")
    assert "nightly-report" in _text(browser, "table.actions-log")
    browser.shot("07-fleet")
    assert daemon.stop() == 0


def test_refused_actions_show_their_one_line_reason(
    browser, console, cli, spawn, *, database_url, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    hold = f"while [ ! -e {release} ]; do sleep 0.05; done"
    cli("tasks", "add", "held", "--every", "1h", "--command", hold)  # --overlap forbid
    read_only = console()
    browser.get(read_only.base + "/tasks/1")
    assert not browser.find_elements(By.XPATH, "//button[normalize-space()='Trigger now']")
    # a form posted anyway (as a stale page or a script would): refused, with its reason
    browser.execute_script(
        "const f = document.createElement('form'); f.method = 'post';"
        "f.action = '/tasks/1/trigger'; document.body.appendChild(f); f.submit();"
    )
    _until(browser, lambda d: d.find_elements(By.ID, "message"))
    assert _text(browser, "#message").startswith("refused: this console is read-only")
    browser.shot("01-read-only-refused")
    assert query(database_url, "SELECT id FROM occurrence") == []

    web = console("--writes")
    _sign_in(browser, web.base)
    browser.get(web.base + "/tasks/1")
    _click(browser, "Trigger now")
    assert _text(browser, "#message") == "occurrence 1 queued"
    daemon = spawn(database_url, "holder")
    wait_for(
        lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'running'"),
        message="the held job to start",
    )
    browser.get(web.base + "/running")
    assert "held" in _text(browser, "#running")  # its owner, lease expiry, takeover point
    browser.shot("02-running")
    browser.get(web.base + "/tasks/1")
    _click(browser, "Trigger now")
    assert _text(browser, "#message") == "occurrence 2 skipped: overlap (an occurrence is active)"
    assert "error" in browser.find_element(By.ID, "message").get_attribute("class")
    browser.shot("03-forbid-refused")
    release.touch()
    wait_for(
        lambda: query(database_url, "SELECT 1 FROM run WHERE status = 'success'"),
        message="the held job to finish",
    )
    assert daemon.stop() == 0
