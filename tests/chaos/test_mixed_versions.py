"""A rolling upgrade with real processes of two builds (guarantee 15): the build of the last
commit before the newest migration beside this one, on one database, through expand, SIGKILLs
of each, the roll of the old replicas, and `migrate --contract`; then `audit` over the history.
Every process runs as its role of `db roles --create`: the owner migrates and grants (each build
its own `db roles`, the new one while old replicas run), the operator defines the tasks, the
daemons of both builds are the daemon role. So an old build that writes something the new
build's grants leave out meets `permission denied`, and the test fails on it. After the roll,
the operator role uses the newer task features (`--in-process`, a cron read by either day
field, `--overlap replace`, `--exclude-calendar`, `tasks trigger --arg`, `tasks pause --until`,
whose end the new build's reconciler carries out as the daemon role). No command is refused
beside the older build: compatibility is promised between releases (ADR 0027).

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

from scheduler_daemon.storage import migration
from tests.role_fleet import RoleFleet, name_options, role_fleet
from tests.support import DaemonProcess, query, wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
VERSIONS = "migrations/versions"
# A SIGKILLed old replica stays registered this long: the contract is refused, then passes.
TIMING = ("--instance-expiry", "15s")
TASKS = 8
# The newer task features, used by the operator role after the roll. The tasks are paused, so
# only the manual firing runs; `manual` has nothing else active (a `forbid` task firing every
# second, as t0-t7, would skip a trigger landing beside a firing of its own).
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
    # Along main's first parents, a merge diffed against its first parent: a branch's migration
    # renumbered at its merge is added by the merge commit, whose first parent is the old build.
    added = _git(
        "log",
        "--first-parent",
        "-m",
        "--diff-filter=A",
        "--format=%H",
        "-n1",
        "--",
        f"{VERSIONS}/{newest}",
    )
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
        # The newer features, as the operator role; the pause's end, as the daemon role.
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
    builds = query(url, "SELECT DISTINCT build_revision AS b FROM run ORDER BY 1")
    revisions = {r["b"] for r in builds}  # an old build before 0004 writes none (NULL)
    assert migration.head_revision() in revisions  # both builds ran jobs
    assert len(revisions) >= 2
    elapsed = time.monotonic() - began
    print(f"mixed-version upgrade: {elapsed:.1f}s, audit: {audit.stdout.strip()[:300]}")
    assert elapsed < 180
