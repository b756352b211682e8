"""A rolling upgrade with real processes of two builds (guarantee 15): the build of the last
commit before the newest migration beside this one, on one database, through expand, SIGKILLs
of each, the roll of the old replicas, and `migrate --contract`; then `audit` over the history.
Every process runs as its role of `db roles --create`: the owner migrates and grants (each build
its own `db roles`, the new one while old replicas run), the operator defines the tasks, the
daemons of both builds are the daemon role. So an old build that writes something the new
build's grants leave out meets `permission denied`, and the test fails on it. While an old
build before revision 0020 is registered, `tasks add --in-process` is refused (exit 2); once it
left, it succeeds; the same for a cron whose `#`, `L5` or `W` sits beside a restricted other day
field while a build before revision 0026 is (ADR 0019), and for `--overlap replace` while a
build before 0031 is (ADR 0022), and for `tasks pause --until` while a build before 0033 is
(ADR 0024; once accepted, the new build's reconciler ends the pause as the daemon role), and
for `tasks trigger --arg` while a build before 0034 is.

The old build comes from `git archive` of that commit, found from the history of
migrations/versions/ (not a fixed hash), into a virtualenv of its own that reuses this one's
installed dependencies. A shallow clone has no such commit: the test is skipped, saying so.
"""

import os
import signal
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scheduler_daemon.domain import control
from scheduler_daemon.storage import migration
from tests.role_fleet import RoleFleet, name_options, role_fleet
from tests.support import DaemonProcess, query, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
VERSIONS = "migrations/versions"
# A SIGKILLed old replica stays registered this long: the contract is refused, then passes.
TIMING = ("--instance-expiry", "15s")
TASKS = 8
# Refused while a build before 0020 is registered; paused, so no daemon of this branch runs it.
IN_PROCESS = ("tasks", "add", "inproc", "--every", "1h", "--call", "tests.jobs:ok")
IN_PROCESS += ("--in-process", "--paused")
# Refused while a build before 0026 is registered: it would fire it on no day (a third Friday is
# never the 8th); paused, as above.
EITHER_DAYS = ("tasks", "add", "either", "--cron", "0 0 8 * 5#3", "--command", "true", "--paused")
# Refused while a build before 0031 is registered: its dispatch would park it and its claim
# start a firing beside its predecessor; paused, as above.
REPLACE = ("tasks", "add", "replacing", "--every", "1h", "--command", "true")
REPLACE += ("--overlap", "replace", "--paused")
# Refused while a build before 0033 is registered: it never reads the end, so it would never
# resume the task. Once accepted, a new build's reconciler (as the daemon role) resumes it.
PAUSE_UNTIL = ("tasks", "pause", "t7", "--until", "2s")
# Refused while a build before 0034 is registered: it would run the job without them. Its task
# is paused (a manual firing runs anyway) and has nothing else active: a `forbid` task firing
# every second, as t0-t7, skips a trigger that lands while a firing of its own is queued or
# running (reason `overlap`), and the occurrence would never succeed (seen in CI 2026-12-07).
TRIGGER_ARGS = ("tasks", "trigger", "manual", "--arg", "mixed=yes")
MANUAL = ("tasks", "add", "manual", "--every", "1h", "--command", "true", "--paused")
# Each refusal: the revision before which a registered build refuses it, the command, what its
# one line says, and a query that finds what it would have written (nothing, when refused).
REFUSED = (
    (
        control.IN_PROCESS_SINCE,
        IN_PROCESS,
        "cannot run in-process",
        "SELECT 1 FROM task WHERE name = 'inproc'",
    ),
    (
        control.EITHER_DAYS_SINCE,
        EITHER_DAYS,
        "cannot have --cron '0 0 8 * 5#3'",
        "SELECT 1 FROM task WHERE name = 'either'",
    ),
    (
        control.REPLACE_SINCE,
        REPLACE,
        "cannot have --overlap replace",
        "SELECT 1 FROM task WHERE name = 'replacing'",
    ),
    (
        control.PAUSE_UNTIL_SINCE,
        PAUSE_UNTIL,
        "cannot be paused --until",
        "SELECT 1 FROM task WHERE name = 't7' AND paused",
    ),
    (
        control.ARGS_SINCE,
        TRIGGER_ARGS,
        "cannot be triggered with arguments",
        "SELECT 1 FROM occurrence WHERE args IS NOT NULL",
    ),
)


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()


def _old_commit() -> str:
    """The parent of the commit that added the newest migration file."""
    try:
        if _git("rev-parse", "--is-shallow-repository") == "true":
            pytest.skip("a shallow clone has no history of migrations/: git fetch --unshallow")
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"no git history here ({exc}): the old build cannot be built")
    newest = sorted(p.name for p in (ROOT / VERSIONS).glob("*.py"))[-1]
    added = _git("log", "--diff-filter=A", "--format=%H", "-n1", "--", f"{VERSIONS}/{newest}")
    if not added:
        pytest.skip(f"{newest} is not committed yet: commit it so the old build can be found")
    return _git("rev-parse", f"{added}^")


def _old_build(tmp_path: Path) -> tuple[str, Path]:
    """(python, cwd) that run the old commit's scheduler-daemon with this venv's dependencies."""
    commit = _old_commit()
    source = tmp_path / "old-source"
    source.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True, timeout=60
    )
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    venv = tmp_path / "old-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The old source first; then this environment's packages (its editable install of the new
    # source comes after the old one on sys.path, so `import scheduler_daemon` is the old build).
    mine = sysconfig.get_paths()["purelib"]
    (Path(site) / "reuse.pth").write_text(f"{source}\nimport site; site.addsitedir({mine!r})\n")
    cwd = tmp_path  # not the checkout: sys.path[0] would be the new source
    found = subprocess.run(
        [str(python), "-c", "import scheduler_daemon, sys; print(scheduler_daemon.__file__)"],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        env={**os.environ, **_build_env(str(python))},
    ).stdout.strip()
    assert found.startswith(str(source)), found
    return str(python), cwd


def _build_env(python: str) -> dict[str, str]:
    """The old build's processes without PYTHONPATH (a worktree's, which names the new source
    first and would make the old build the new one); the new build's as they are."""
    return {} if python == sys.executable else {"PYTHONPATH": ""}


def _cli(python: str, cwd: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [python, "-m", "scheduler_daemon", "--database-url", url, "--log-level", "warning", *args],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        timeout=120,
        env={**os.environ, **_build_env(python)},
    )


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


def test_a_rolling_upgrade_never_drops_or_doubles_a_run(
    empty_database_url, roles: RoleFleet, tmp_path
) -> None:
    began = time.monotonic()
    url = empty_database_url  # the superuser's, for the test's own reads
    old_python, cwd = _old_build(tmp_path)
    new_python = sys.executable
    old_head = _cli(old_python, cwd, roles.reader, "migrate", "--check").stdout
    started: list[DaemonProcess] = []

    def start(name: str, python: str) -> DaemonProcess:
        daemon = DaemonProcess(
            roles.daemon, tmp_path, name, *TIMING, python=python, cwd=cwd, env=_build_env(python)
        )
        started.append(daemon)
        return daemon

    def new_cli(*args: str, role: str | None = None) -> subprocess.CompletedProcess[str]:
        return _cli(new_python, cwd, role or roles.owner, *args)

    def grant(python: str) -> None:
        """`db roles` of the build `python`, as the owner: what that build grants."""
        granted = _cli(python, cwd, roles.owner, "db", "roles", *name_options(roles.names))
        assert granted.returncode == 0, granted.stdout + granted.stderr

    try:
        # The database as the old build left it: migrated and granted by it, tasks added by it.
        assert _cli(old_python, cwd, roles.owner, "migrate").returncode == 0
        grant(old_python)
        before = migration.current_revision(url)
        assert before is not None, old_head
        assert before != migration.head_revision(), old_head
        for i in range(TASKS):
            key = ["--concurrency-key", f"k{i % 2}"] if i < 4 else []
            added = _cli(
                old_python,
                cwd,
                roles.operator,
                *("tasks", "add", f"t{i}", "--every", "1s", "--command", "sleep 0.4", *key),
            )
            assert added.returncode == 0, added.stderr
        added = _cli(old_python, cwd, roles.operator, *MANUAL)
        assert added.returncode == 0, added.stderr
        old_a, old_b = start("old-a", old_python), start("old-b", old_python)
        old_a_id, old_b_id = old_a.instance_id(), old_b.instance_id()
        # A new replica started before the expand asks for `migrate` with its own exit code.
        early = start("new-early", new_python)
        assert early.proc.wait(30) == 4, early.log()
        assert "run `scheduler-daemon migrate`" in early.log()

        wait_for(lambda: _runs_by(url, old_a_id) >= 3, message="the old build to run jobs")
        expanded = new_cli("migrate")
        assert expanded.returncode == 0, expanded.stderr
        grant(new_python)  # the new build's grants, while the old replicas keep working
        # While an old build before revision 0020 is registered, an in-process task is refused
        # with one line that names its instances, and nothing is written (ADR 0010): it would
        # run it in a worker. (The old build is the one before the newest migration: once that
        # is past 0020, it knows the field, and integration/test_in_process_task.py alone
        # covers the refusal.)
        for since, command, says, written in REFUSED:
            if before < since:
                refused = new_cli(*command, role=roles.operator)
                assert refused.returncode == 2, refused.stdout + refused.stderr
                assert refused.stderr.count("\n") == 1, refused.stderr
                assert says in refused.stderr, refused.stderr
                assert {old_a_id, old_b_id} <= set(refused.stderr.split()), refused.stderr
                assert not query(url, written), command
        # A release whose newest step is a contract leaves it pending; one whose newest steps
        # are all expand steps (an earlier contract ran in that migrate) leaves none.
        build = migration.build()
        pending = [s.revision for s in build.after(build.needs)]
        assert ("contract step(s)" in expanded.stdout) == bool(pending), expanded.stdout
        new_a = start("new-a", new_python)  # its supervisor's restart, after the expand
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
        new_b = start("new-b", new_python)
        new_b.instance_id()
        # Roll the last old replica to the new build: SIGTERM drains it.
        assert old_b.stop() == 0, old_b.log()[-3000:]
        new_c = start("new-c", new_python)
        new_c.instance_id()

        if pending:
            # The SIGKILLed old replica is still registered: the contract waits for it.
            refused = new_cli("migrate", "--contract")
            assert refused.returncode == 6, refused.stdout + refused.stderr
            assert old_a_id in refused.stderr
            assert migration.current_revision(url) != migration.head_revision()
            contracted = wait_for(
                lambda: (r := new_cli("migrate", "--contract")).returncode == 0 and r,
                timeout=40,
                interval=1,
                message="the killed old replica's row to expire and the contract to pass",
            )
            assert migration.current_revision(url) == migration.head_revision(), contracted.stdout
            grant(new_python)  # the grants for the builds the contract left admitted
            # An old build is refused from now on, with its own exit code.
            late = start("old-late", old_python)
            assert late.proc.wait(30) == 5, late.log()
        else:
            # Nothing to contract: `--contract` changes nothing, and the old build may still
            # register and work beside the new one.
            assert new_cli("migrate", "--contract").returncode == 0
            assert migration.current_revision(url) == migration.head_revision()
            late = start("old-late", old_python)
            late.instance_id()
            assert late.stop() == 0, late.log()[-3000:]
        # Once no old build is registered (the killed one's row expires), the same command
        # succeeds.
        wait_for(
            lambda: new_cli(*IN_PROCESS, role=roles.operator).returncode == 0,
            timeout=40,
            interval=1,
            message="the in-process task to be accepted once the old build left",
        )
        assert query(url, "SELECT in_process FROM task WHERE name = 'inproc'") == [
            {"in_process": True}
        ]
        wait_for(
            lambda: new_cli(*EITHER_DAYS, role=roles.operator).returncode == 0,
            timeout=40,
            interval=1,
            message="the cron read by either day field to be accepted once the old build left",
        )
        wait_for(
            lambda: new_cli(*REPLACE, role=roles.operator).returncode == 0,
            timeout=40,
            interval=1,
            message="the replace task to be accepted once the old build left",
        )
        wait_for(
            lambda: new_cli(*PAUSE_UNTIL, role=roles.operator).returncode == 0,
            timeout=40,
            interval=1,
            message="pause --until to be accepted once the old build left",
        )
        wait_for(
            lambda: query(url, "SELECT paused FROM task WHERE name = 't7'") == [{"paused": False}],
            timeout=30,
            message="the new build's reconciler to end the pause",
        )
        wait_for(
            lambda: new_cli(*TRIGGER_ARGS, role=roles.operator).returncode == 0,
            timeout=40,
            interval=1,
            message="a trigger with arguments to be accepted once the old build left",
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
    builds = query(url, "SELECT DISTINCT build_revision AS b FROM run ORDER BY 1")
    revisions = {r["b"] for r in builds}  # an old build before 0004 writes none (NULL)
    assert migration.head_revision() in revisions  # both builds ran jobs
    assert len(revisions) >= 2
    elapsed = time.monotonic() - began
    print(f"mixed-version upgrade: {elapsed:.1f}s, audit: {audit.stdout.strip()[:300]}")
    assert elapsed < 180
