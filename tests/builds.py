"""Other builds of this source, each in a directory and a virtualenv of its own, for tests that run
two builds against one database (tests/chaos/test_mixed_versions.py; ADR 0027):

- `older_build`: the newest release (ADR 0027 §2: the first-parent commit that sets a final
  `__version__` of 1.0.0 or later), found from git history alone; before the first release, this
  checkout itself (`git archive HEAD`, or its files as they are when the work tree has changes),
  so `main` runs beside `main`. Never an unreleased commit of the past: no promise holds there.
- `newer_build`: this checkout plus `synthetic_steps`, an expand step and a contract step after
  its schema head, written into its own copy: the schema change a next release brings.

A build's virtualenv holds no package of its own: a `.pth` puts its source first, then this
environment's site-packages (the dependencies, and the editable install of this checkout, which
the source in front of it hides). Its processes run with PYTHONPATH cleared (a worktree's names
this checkout's source first) and from a directory of their own (`python -m` puts the working
directory first on sys.path). Without git, a full clone or a virtualenv the test is skipped,
saying why; under CI=true it fails instead. A build that does not import from its own source, or
whose chain is not what was built, always fails.
"""

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from scheduler_daemon.storage import migration
from tests.support import unavailable

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = Path("migrations") / "versions"
VERSION_FILE = "scheduler_daemon/version.py"
# ADR 0027 §2: a release sets a final version of 1.0.0 or later (no .dev, a, b or rc suffix).
RELEASE_LINE = r'^__version__ = "[1-9][0-9]*\.[0-9]+\.[0-9]+"$'
SYNTHETIC_EXPAND = "9001"
SYNTHETIC_CONTRACT = "9002"
SYNTHETIC_COLUMN = "synthetic_note"  # on task: added by the expand step
SYNTHETIC_CHECK = "task_synthetic_note_length"  # added NOT VALID and validated by the contract
BUILD_ENV = {"PYTHONPATH": ""}


@dataclass(frozen=True)
class SourceBuild:
    """A build runnable beside the one under test."""

    name: str  # what it is, for messages: "release 1.0.0 (1a2b3c4d5e)", "this checkout (...)"
    python: str
    cwd: Path  # its processes' working directory: not a checkout
    head: str  # its schema head

    @property
    def env(self) -> dict[str, str]:
        """What its processes' environment overrides (PYTHONPATH cleared)."""
        return dict(BUILD_ENV)

    def command(self, url: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`scheduler-daemon --database-url url --log-level warning args...` of this build."""
        options = ("--database-url", url, "--log-level", "warning")
        return subprocess.run(
            [self.python, "-m", "scheduler_daemon", *options, *args],
            capture_output=True,
            text=True,
            check=False,
            cwd=self.cwd,
            timeout=120,
            env={**os.environ, **self.env},
        )


def git(*args: str, root: Path = ROOT) -> str:
    """git's output in `root`; without git, or outside a repository, the test cannot build."""
    if shutil.which("git") is None:
        unavailable("no git here: the builds of other revisions cannot be made")
    try:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=60
        ).stdout.strip()
    except subprocess.CalledProcessError as exc:
        unavailable(f"git {' '.join(args)} failed in {root}: {exc.stderr.strip()}")
        raise  # unreachable: unavailable raises


def full_history(root: Path = ROOT) -> None:
    """Releases are found in history: a shallow clone may lack them."""
    if git("rev-parse", "--is-shallow-repository", root=root) == "true":
        unavailable("a shallow clone may lack the newest release: git fetch --unshallow")


def release_commit(root: Path = ROOT) -> str | None:
    """The newest release on the first-parent history of HEAD (ADR 0027 §2), None before the
    first. `-G` also lists a commit that moved *away* from a release line (1.0.0 -> 1.1.0.dev0),
    so each candidate's own file is read; a merge counts by its diff against its first parent."""
    found = git(
        "log",
        "--first-parent",
        "-m",
        "--format=%H",
        f"-G{RELEASE_LINE}",
        "--",
        VERSION_FILE,
        root=root,
    )
    for commit in dict.fromkeys(found.split()):  # newest first
        if re.search(RELEASE_LINE, git("show", f"{commit}:{VERSION_FILE}", root=root), re.M):
            return commit
    return None


def export_commit(commit: str, dest: Path, root: Path = ROOT) -> None:
    """The tree of `commit` (as `git archive` gives it) into `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(root), "archive", commit], capture_output=True, check=True, timeout=60
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True, timeout=60)


def export_checkout(dest: Path, root: Path = ROOT) -> str:
    """This checkout's source into `dest`: HEAD's tree when the work tree is clean, else the
    files git would see (tracked and untracked, not ignored) as they are on disk, so a migration
    not yet committed is part of it. Says which, for messages."""
    head = git("rev-parse", "--short=10", "HEAD", root=root)
    if not git("status", "--porcelain", root=root):
        export_commit("HEAD", dest, root)
        return f"this checkout (HEAD {head})"
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard", root=root)
    for name in filter(None, listed.split("\0")):
        if (root / name).is_file():  # a deleted tracked file is still listed
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, dest / name)
    return f"this checkout (HEAD {head} with its uncommitted changes)"


def synthetic_steps(head: str) -> dict[str, str]:
    """The text of an expand step and a contract step after `head`, by file name: the expand
    adds a nullable `task.synthetic_note` (every build survives an added column: a new column
    is never read by a build that predates it); the contract adds a CHECK on it, NOT VALID and
    then validated in a transaction of its own, standing in for a constraint only builds that
    know the expand are trusted to meet. Both wait for locks at most lock_timeout and undo in
    their downgrade, as tests/unit/test_migration_lint.py asks of a real step."""
    check = f"{SYNTHETIC_CHECK} CHECK (length({SYNTHETIC_COLUMN}) <= 200)"
    return {
        f"{SYNTHETIC_EXPAND}_synthetic_expand.py": _STEP.format(
            what="Expand (synthetic, tests/builds.py): a nullable column task.synthetic_note.",
            revision=SYNTHETIC_EXPAND,
            down_revision=head,
            phase="expand",
            upgrade=f"ALTER TABLE task ADD COLUMN IF NOT EXISTS {SYNTHETIC_COLUMN} text",
            validate="",
            downgrade=f"ALTER TABLE task DROP COLUMN IF EXISTS {SYNTHETIC_COLUMN}",
        ),
        f"{SYNTHETIC_CONTRACT}_synthetic_contract.py": _STEP.format(
            what="Contract (synthetic, tests/builds.py): a validated CHECK on task.synthetic_note.",
            revision=SYNTHETIC_CONTRACT,
            down_revision=SYNTHETIC_EXPAND,
            phase="contract",
            upgrade=f"ALTER TABLE task ADD CONSTRAINT {check} NOT VALID",
            validate=_VALIDATE.format(
                statement=f"ALTER TABLE task VALIDATE CONSTRAINT {SYNTHETIC_CHECK}"
            ),
            downgrade=f"ALTER TABLE task DROP CONSTRAINT IF EXISTS {SYNTHETIC_CHECK}",
        ),
    }


_STEP = '''"""{what}

Revision ID: {revision}
Revises: {down_revision}
"""

from alembic import op

revision = "{revision}"
down_revision = "{down_revision}"
branch_labels = None
depends_on = None
phase = "{phase}"


def upgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("{upgrade}"){validate}


def downgrade() -> None:
    op.execute("SET LOCAL lock_timeout = '5s'")
    op.execute("{downgrade}")
'''
_VALIDATE = """
    with op.get_context().autocommit_block():
        op.execute("SET lock_timeout = '5s'")
        # Re-running VALIDATE is a no-op once valid: robust without a transaction.
        op.execute("-- squawk-ignore prefer-robust-stmts\\n{statement}")
        op.execute("RESET lock_timeout")"""


def _virtualenv(source: Path, where: Path) -> str:
    """A virtualenv in `where` that imports `source` first, then this one's packages."""
    venv = where / "venv"
    made = subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if made.returncode != 0:
        unavailable(f"python -m venv failed: {made.stderr.strip()[-500:]}")
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    mine = sysconfig.get_paths()["purelib"]
    (Path(site) / "reuse.pth").write_text(f"{source}\nimport site; site.addsitedir({mine!r})\n")
    return str(python)


def _build(name: str, source: Path, where: Path) -> SourceBuild:
    """The build of `source`, checked to import from it; its schema head read by itself."""
    python = _virtualenv(source, where)
    probe = (
        "import scheduler_daemon; from scheduler_daemon.storage import migration; "
        "print(scheduler_daemon.__file__); print(migration.head_revision())"
    )
    found = subprocess.run(
        [python, "-c", probe],
        capture_output=True,
        text=True,
        check=False,
        cwd=where,
        timeout=120,
        env={**os.environ, **BUILD_ENV},
    )
    assert found.returncode == 0, f"{name} does not start: {found.stderr[-3000:]}"
    module, head = found.stdout.split()
    assert module.startswith(str(source)), f"{name} imports {module}, not its own source"
    return SourceBuild(name, python, where, head)


def older_build(where: Path, root: Path = ROOT) -> SourceBuild:
    """The newest release, or this checkout before the first one (ADR 0027), built in `where`;
    its schema head must be in this build's chain."""
    full_history(root)
    source = where / "source"
    release = release_commit(root)
    if release is None:
        name = export_checkout(source, root) + ", no release yet"
    else:
        export_commit(release, source, root)
        version = re.search(r'^__version__ = "(.+)"$', (source / VERSION_FILE).read_text(), re.M)
        name = f"release {version[1] if version else '?'} ({release[:10]})"
    built = _build(name, source, where)
    assert migration.build().knows(built.head), (
        f"{name}: its schema head {built.head} is not in this build's chain "
        f"(head {migration.head_revision()}): ADR 0027 promises the newest release to main"
    )
    return built


def newer_build(where: Path) -> SourceBuild:
    """This checkout plus the synthetic expand and contract steps after its head, built in
    `where`; its chain must end with them."""
    source = where / "source"
    name = export_checkout(source) + " + synthetic expand and contract steps"
    for file, text in synthetic_steps(migration.head_revision()).items():
        (source / VERSIONS / file).write_text(text)
    built = _build(name, source, where)
    assert built.head == SYNTHETIC_CONTRACT, f"{name}: its chain ends at {built.head}"
    return built
