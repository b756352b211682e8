"""A rolling upgrade with real processes of two builds (guarantee 15) on one database, through
expand, SIGKILLs of each, the roll of the old replicas and `migrate --contract`; then `audit`
over the history: no run dropped or doubled.

The builds (tests/builds.py, ADR 0027): compatibility is promised from the newest release to
main, so the old build is the newest release, found from git history alone; until a release
exists it is this checkout itself. Never an unreleased commit of the past: after the squash of
0001-0037 the commit before the newest migration could not run against the baseline. The new
build is this checkout plus a synthetic expand step (a nullable task column) and contract step
(a validated CHECK on it) after its head: the schema change a next release brings. Each build
runs from a virtualenv of its own that reuses this one's installed dependencies. Without git or
with a shallow clone the test is skipped, saying so; under CI=true it fails instead.

Every process runs as its role of `db roles --create`: the owner migrates and grants (each build
its own `db roles`, the new one while old replicas run), the operator defines the tasks, the
daemons of both builds are the daemon role. So an old build that writes something the new
build's grants leave out meets `permission denied`, and the test fails on it. After the roll,
the operator role uses the task features through the new build (`--in-process`, a cron read by
either day field, `--overlap replace`, `--exclude-calendar`, `tasks trigger --arg`, `tasks pause
--until`, whose end the new build's reconciler carries out as the daemon role).
"""

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import pytest

from scheduler_daemon.storage import migration
from tests import builds
from tests.builds import SourceBuild
from tests.role_fleet import RoleFleet, name_options, role_fleet
from tests.support import DaemonProcess, query, wait_for

pytestmark = pytest.mark.slow
# A SIGKILLed old replica stays registered this long; the contract passes once its row is gone.
TIMING = ("--instance-expiry", "15s")
TASKS = 8
# The task features, used by the operator role through the new build after the roll. The tasks
# are paused, so only the manual firing runs; `manual` has nothing else active (a `forbid` task
# firing every second, as t0-t7, would skip a trigger landing beside a firing of its own).
HOURLY = ("--every", "1h", "--paused")
TRUE = (*HOURLY, "--command", "true")
FEATURES = (
    ("tasks", "add", "inproc", *HOURLY, "--call", "tests.jobs:ok", "--in-process"),
    ("tasks", "add", "either", "--cron", "0 0 8 * 5#3", "--command", "true", "--paused"),
    ("tasks", "add", "replacing", *TRUE, "--overlap", "replace"),
    ("calendars", "add", "mixed-holidays", "--date", "2030-12-25"),
    ("tasks", "add", "excluding", *TRUE, "--exclude-calendar", "mixed-holidays"),
    ("tasks", "add", "manual", *TRUE),
)
TRIGGER_ARGS = ("tasks", "trigger", "manual", "--arg", "mixed=yes")
PAUSE_UNTIL = ("tasks", "pause", "t7", "--until", "2s")


def _kill_while_running(url: str, daemon: DaemonProcess, instance: str) -> int:
    """SIGKILLs `daemon` while it holds a running run; returns the id of a run it left running.
    The run is picked after the kill: one seen running just before it could still have ended
    and been recorded in between (its jobs last 0.4 s), and would then never be taken over."""
    running = "SELECT id FROM run WHERE owner = %s AND status = 'running' ORDER BY id"
    wait_for(lambda: query(url, running, (instance,)), message=f"{instance} to hold a running run")
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.proc.wait(30)
    left = query(url, running, (instance,))
    assert left, f"{instance}'s running runs all ended before the kill landed"
    return left[0]["id"]


def _taken_over_by(url: str, run_id: int, timeout: float = 30.0) -> str:
    """The instance that took the run over once its owner died."""
    (row,) = wait_for(
        lambda: query(
            url,
            "SELECT finished_by FROM run WHERE id = %s AND status = 'interrupted'",
            (run_id,),
        ),
        timeout=timeout,
        message=f"run {run_id} to be taken over",
    )
    return row["finished_by"]


def _runs_by(url: str, instance: str) -> int:
    rows = query(url, "SELECT count(*) AS n FROM run WHERE owner = %s", (instance,))
    return rows[0]["n"]


@pytest.fixture
def roles(empty_database_url: str) -> Iterator[RoleFleet]:
    """The four roles, created before the first migrate as an administrator does."""
    with role_fleet(empty_database_url, grant=False) as fleet:
        yield fleet


def _compatible(build: SourceBuild, url: str) -> dict[str, bool]:
    """`status --json` of `build`: whether each registered instance may write to the schema."""
    shown = build.command(url, "status", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    return {row["id"]: row["compatible"] for row in json.loads(shown.stdout)["instances"]}


def _synthetic_schema(url: str) -> tuple[bool, bool | None]:
    """Whether the expand's column exists, and whether the contract's CHECK is validated."""
    column = query(
        url,
        "SELECT 1 FROM information_schema.columns WHERE table_name = 'task' AND column_name = %s",
        (builds.SYNTHETIC_COLUMN,),
    )
    check = query(
        url, "SELECT convalidated FROM pg_constraint WHERE conname = %s", (builds.SYNTHETIC_CHECK,)
    )
    return bool(column), check[0]["convalidated"] if check else None


def test_a_rolling_upgrade_never_drops_or_doubles_a_run(
    empty_database_url, roles: RoleFleet, tmp_path
) -> None:
    began = time.monotonic()
    url = empty_database_url  # the superuser's, for the test's own reads
    old = builds.older_build(tmp_path / "old")
    new = builds.newer_build(tmp_path / "new")
    print(f"old build: {old.name} (schema {old.head}); new build: {new.name}")
    started: list[DaemonProcess] = []

    def start(name: str, build: SourceBuild) -> DaemonProcess:
        daemon = DaemonProcess(
            roles.daemon, tmp_path, name, *TIMING, python=build.python, cwd=build.cwd, env=build.env
        )
        started.append(daemon)
        return daemon

    def new_cli(*args: str, role: str | None = None) -> subprocess.CompletedProcess[str]:
        return new.command(role or roles.owner, *args)

    def grant(build: SourceBuild) -> None:
        """`db roles` of `build`, as the owner: what that build grants."""
        granted = build.command(roles.owner, "db", "roles", *name_options(roles.names))
        assert granted.returncode == 0, granted.stdout + granted.stderr

    try:
        # The database as the old build left it: migrated and granted by it, tasks added by it.
        migrated = old.command(roles.owner, "migrate")
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        grant(old)
        assert migration.current_revision(url) == old.head
        for i in range(TASKS):
            key = ["--concurrency-key", f"k{i % 2}"] if i < 4 else []
            added = old.command(
                roles.operator,
                *("tasks", "add", f"t{i}", "--every", "1s", "--command", "sleep 0.4", *key),
            )
            assert added.returncode == 0, added.stderr
        old_a, old_b = start("old-a", old), start("old-b", old)
        old_a_id, old_b_id = old_a.instance_id(), old_b.instance_id()
        # A new replica started before the expand asks for `migrate` with its own exit code.
        early = start("new-early", new)
        assert early.proc.wait(30) == 4, early.log()
        assert "run `scheduler-daemon migrate`" in early.log()

        wait_for(lambda: _runs_by(url, old_a_id) >= 3, message="the old build to run jobs")
        # The expand only, while the old replicas run; the contract is left pending.
        expanded = new_cli("migrate")
        assert expanded.returncode == 0, expanded.stdout + expanded.stderr
        assert f"contract step(s) {builds.SYNTHETIC_CONTRACT} pending" in expanded.stdout
        assert migration.current_revision(url) == builds.SYNTHETIC_EXPAND
        assert _synthetic_schema(url) == (True, None)
        grant(new)  # the new build's grants, while the old replicas keep working
        # The old build works with the expanded schema, by its own judgement and the new one's.
        checked = old.command(roles.reader, "migrate", "--check")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert _compatible(new, roles.reader) == {old_a_id: True, old_b_id: True}
        new_a = start("new-a", new)  # its supervisor's restart, after the expand
        new_a_id = new_a.instance_id()
        wait_for(lambda: _runs_by(url, new_a_id) >= 3, message="the new build to run jobs")
        assert old_a.proc.poll() is None  # the old ones kept working
        assert old_b.proc.poll() is None
        assert _runs_by(url, old_b_id) >= 1

        # SIGKILL one of each, each while only the other build can take over what it left
        # running: the old replica's run goes to the new build (the other old one is frozen
        # meanwhile, and its own runs too), then the new replica's run goes to the old build.
        old_b.signal(signal.SIGSTOP)
        old_run = _kill_while_running(url, old_a, old_a_id)
        assert _taken_over_by(url, old_run) == new_a_id
        old_b.signal(signal.SIGCONT)
        new_run = _kill_while_running(url, new_a, new_a_id)
        # The rescuer was frozen for a whole takeover just before: it first finds its own runs
        # taken over. Takeover at defaults is 15 s at most; one clean-clone CI run (2026-12-06)
        # did not see it within 30 s, where three reruns passed: 60 s, and the cause is open,
        # so a failure here says what the rescuer logged.
        try:
            rescuer = _taken_over_by(url, new_run, timeout=60.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; old-b logged:\n{old_b.log()[-6000:]}") from None
        assert rescuer == old_b_id, old_b.log()[-6000:]
        new_b = start("new-b", new)
        new_b.instance_id()
        # An old replica still runs: the contract is refused, naming it, and changes nothing.
        refused = new_cli("migrate", "--contract")
        assert refused.returncode == 6, refused.stdout + refused.stderr
        assert old_b_id in refused.stderr
        assert migration.current_revision(url) == builds.SYNTHETIC_EXPAND
        assert _synthetic_schema(url) == (True, None)
        # Roll the last old replica to the new build: SIGTERM drains it.
        assert old_b.stop() == 0, old_b.log()[-3000:]
        new_c = start("new-c", new)
        new_c.instance_id()
        # Once no old instance is registered (the SIGKILLed one's row expires, if it has not
        # yet), the contract passes.
        contracted = wait_for(
            lambda: (r := new_cli("migrate", "--contract")).returncode == 0 and r,
            timeout=40,
            interval=1,
            message="the old replicas' rows to go and the contract to pass",
        )
        assert migration.current_revision(url) == new.head, contracted.stdout
        assert _synthetic_schema(url) == (True, True)
        grant(new)  # the grants for the builds the contract left admitted
        # An old build is refused from now on, with its own exit code.
        late = start("old-late", old)
        assert late.proc.wait(30) == 5, late.log()
        # The task features, as the operator role; the pause's end, as the daemon role.
        for command in (*FEATURES, TRIGGER_ARGS, PAUSE_UNTIL):
            done = new_cli(*command, role=roles.operator)
            assert done.returncode == 0, (command, done.stderr)
        assert query(url, "SELECT in_process FROM task WHERE name = 'inproc'") == [
            {"in_process": True}
        ]
        wait_for(
            lambda: query(url, "SELECT paused FROM task WHERE name = 't7'") == [{"paused": False}],
            timeout=30,
            message="the new build's reconciler to end the pause",
        )
        wait_for(
            lambda: query(
                url,
                'SELECT 1 FROM occurrence WHERE args = \'{"mixed": "yes"}\'::jsonb'
                " AND status = 'success'",
            ),
            timeout=30,
            message="the new build to run the triggered occurrence",
        )
        time.sleep(3)  # the new build works on after the contract
        (stopped,) = query(url, "SELECT now() AS t")
        for daemon in (new_b, new_c):
            assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        for daemon in started:
            daemon.kill()
    for daemon in started:
        assert "permission denied" not in daemon.log(), (daemon.name, daemon.log()[-6000:])
    time.sleep(3 + 1 + 1)  # runs of killed processes pass their takeover point
    recovered = new_cli("recover", "--lease-ttl", "3s", "--lease-grace", "1s", role=roles.daemon)
    assert recovered.returncode == 0, recovered.stderr
    audit = new_cli(
        "audit", "--until", stopped["t"].isoformat(), "--settle", "5s", role=roles.reader
    )
    assert audit.returncode == 0, audit.stdout[-5000:] + audit.stderr
    builds_that_ran = query(url, "SELECT DISTINCT build_revision AS b FROM run ORDER BY 1")
    assert {r["b"] for r in builds_that_ran} == {old.head, new.head}  # both builds ran jobs
    elapsed = time.monotonic() - began
    print(f"mixed-version upgrade: {elapsed:.1f}s, audit: {audit.stdout.strip()[:300]}")
    assert elapsed < 180


def _marked_runs(url: str) -> list[dict[str, object]]:
    """The runs of the marked task's occurrences: owner, status, who ended them, the build."""
    return query(
        url,
        "SELECT r.id, r.owner, r.status, r.finished_by, r.build_revision FROM run r "
        "JOIN occurrence o ON o.id = r.occurrence_id JOIN task t ON t.id = o.task_id "
        "WHERE t.name = 'marked' ORDER BY r.id",
    )


def test_a_build_without_a_revision_never_runs_a_task_marked_with_it(
    empty_database_url, tmp_path
) -> None:
    """ADR 0029 with real daemons of two builds: a task marked `needs_build = 9001` (what the
    Client writes for a feature of the synthetic expand step while an older build is
    registered) is never dispatched, claimed or taken over by a daemon of the build whose chain
    lacks 9001, which keeps running the unmarked task beside it; daemons of the build with 9001
    run it and take over the run a killed one left. Fails without the mechanism: the old daemon,
    alone at first, dispatches and runs the marked task."""
    url = empty_database_url
    old = builds.older_build(tmp_path / "old")
    new = builds.newer_build(tmp_path / "new")
    started: list[DaemonProcess] = []

    def start(name: str, build: SourceBuild) -> DaemonProcess:
        daemon = DaemonProcess(
            url, tmp_path, name, *TIMING, python=build.python, cwd=build.cwd, env=build.env
        )
        started.append(daemon)
        return daemon

    def ok(done: subprocess.CompletedProcess[str]) -> None:
        assert done.returncode == 0, done.stdout + done.stderr

    try:
        ok(old.command(url, "migrate"))
        ok(new.command(url, "migrate"))  # the expand step 9001; the contract left pending
        assert migration.current_revision(url) == builds.SYNTHETIC_EXPAND
        for name, command in (("marked", "sleep 2"), ("plain", "sleep 0.2")):
            ok(new.command(url, "tasks", "add", name, "--every", "1s", "--command", command))
        query(
            url,
            "UPDATE task SET needs_build = %s WHERE name = 'marked' RETURNING id",
            (builds.SYNTHETIC_EXPAND,),
        )
        old_a = start("old-a", old)
        old_id = old_a.instance_id()
        wait_for(lambda: _runs_by(url, old_id) >= 5, message="the old build to run jobs")
        # Alone, the old build dispatched nothing of the marked task (its due scan never
        # read it), and ran only the plain one.
        firings = "SELECT count(*) AS n FROM occurrence o JOIN task t ON t.id = o.task_id "
        assert query(url, firings + "WHERE t.name = 'marked'") == [{"n": 0}]
        new_b = start("new-b", new)
        new_b_id = new_b.instance_id()
        # The new build dispatches and runs it; kill it while it holds a run of it.
        wait_for(
            lambda: len([r for r in _marked_runs(url) if r["status"] == "success"]) >= 2,
            timeout=60,
            message="the new build to run the marked task",
        )
        left = wait_for(
            lambda: [r for r in _marked_runs(url) if r["status"] == "running"],
            message="a running run of the marked task",
        )
        os.kill(new_b.pid, signal.SIGKILL)
        new_b.proc.wait(30)
        # Past its takeover point (3 s lease, 1 s grace, a pass a second) and then some, the old
        # build has not taken it over, nor claimed any queued firing of the marked task.
        ran_before = _runs_by(url, old_id)
        time.sleep(10)
        assert old_a.proc.poll() is None, old_a.log()[-3000:]
        assert _runs_by(url, old_id) > ran_before  # it kept working meanwhile
        still = {r["id"]: r for r in _marked_runs(url)}
        assert still[left[0]["id"]]["status"] == "running", still
        # A daemon of the new build takes it over and runs the task on.
        new_c = start("new-c", new)
        new_c_id = new_c.instance_id()
        assert _taken_over_by(url, left[0]["id"]) == new_c_id
        wait_for(
            lambda: any(r["owner"] == new_c_id for r in _marked_runs(url)),
            timeout=30,
            message="the new build's second daemon to run the marked task",
        )
        for daemon in (old_a, new_c):
            assert daemon.stop() == 0, daemon.log()[-3000:]
    finally:
        for daemon in started:
            daemon.kill()
    marked = _marked_runs(url)
    assert marked
    assert {r["owner"] for r in marked} <= {new_b_id, new_c_id}, marked
    assert {r["finished_by"] for r in marked} - {None} <= {new_b_id, new_c_id}, marked
    assert {r["build_revision"] for r in marked} == {new.head}, marked
    plain = query(
        url,
        "SELECT DISTINCT r.owner FROM run r JOIN occurrence o ON o.id = r.occurrence_id "
        "JOIN task t ON t.id = o.task_id WHERE t.name = 'plain'",
    )
    assert old_id in {r["owner"] for r in plain}
