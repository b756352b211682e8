"""tests/builds.py on git repositories of its own (no database): the release it finds from
history alone (ADR 0027 §2), and the source it exports of a clean or a changed work tree."""

import ast
import shutil
import subprocess
from pathlib import Path

import pytest

from scheduler_daemon.storage import migration
from tests import builds
from tests.support import unavailable

VERSION = "scheduler_daemon/version.py"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        unavailable("no git here")
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text("ignored/\n")
    _commit(root, "0.1.0", "the first build (not published)")
    return root


def _git(root: Path, *args: str) -> str:
    identity = ("-c", "user.name=t", "-c", "user.email=t@example.invalid")
    return subprocess.run(
        ["git", "-C", str(root), *identity, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


def _commit(root: Path, version: str, message: str) -> str:
    """A commit setting `__version__` to `version`; its hash."""
    (root / VERSION).parent.mkdir(parents=True, exist_ok=True)
    (root / VERSION).write_text(f'"""The version."""\n\n__version__ = "{version}"\n')
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "--allow-empty", "-m", message)
    return _git(root, "rev-parse", "HEAD")


def test_no_release_is_found_before_a_final_version_of_one_or_more(repo: Path) -> None:
    for version in ("0.2.0", "1.0.0.dev0", "1.0.0rc1", "1.0.0a1", "1.0.0b2"):
        _commit(repo, version, f"version {version}")
    assert builds.release_commit(repo) is None


def test_the_newest_release_is_the_commit_that_set_it_not_the_one_that_moved_past_it(
    repo: Path,
) -> None:
    """Catches a lookup that takes `git log -G`'s first hit: the commit that moved from 1.1.0 to
    1.2.0.dev0 removed a release line, so it is listed first, but it is no release."""
    _commit(repo, "1.0.0", "release 1.0.0")
    newest = _commit(repo, "1.1.0", "release 1.1.0")
    _commit(repo, "1.2.0.dev0", "open 1.2.0")
    (repo / "README").write_text("later work\n")
    _git(repo, "add", "README")
    _git(repo, "commit", "-q", "-m", "later work")
    assert builds.release_commit(repo) == newest


def test_a_release_merged_from_a_branch_is_the_merge_on_main(repo: Path) -> None:
    """Along main's first parents, the merge that brought the version line is the release; the
    branch's own commit is not on that history."""
    _git(repo, "checkout", "-q", "-b", "release")
    branch = _commit(repo, "1.0.0", "release 1.0.0 on a branch")
    _git(repo, "checkout", "-q", "main")
    (repo / "other").write_text("main moved on\n")
    _git(repo, "add", "other")
    _git(repo, "commit", "-q", "-m", "main moved on")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge release", "release")
    merge = _git(repo, "rev-parse", "HEAD")
    assert builds.release_commit(repo) == merge != branch


def test_a_clean_checkout_exports_head_and_a_changed_one_its_files_as_they_are(
    repo: Path, tmp_path: Path
) -> None:
    clean = builds.export_checkout(tmp_path / "clean", repo)
    assert "uncommitted" not in clean
    assert (tmp_path / "clean" / VERSION).read_text().endswith('"0.1.0"\n')
    (repo / VERSION).write_text('__version__ = "0.1.1"\n')  # changed, not committed
    (repo / "new.py").write_text("x = 1\n")  # untracked
    (repo / "ignored").mkdir()
    (repo / "ignored" / "big").write_text("not source\n")
    changed = builds.export_checkout(tmp_path / "changed", repo)
    assert "uncommitted" in changed
    assert (tmp_path / "changed" / VERSION).read_text() == '__version__ = "0.1.1"\n'
    assert (tmp_path / "changed" / "new.py").exists()
    assert not (tmp_path / "changed" / "ignored").exists()


def test_the_synthetic_steps_follow_the_head_as_expand_then_contract() -> None:
    def fields(text: str) -> dict[str, object]:
        tree = ast.parse(text)
        return {
            node.targets[0].id: ast.literal_eval(node.value)
            for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        }

    steps = builds.synthetic_steps("0037")
    chain = [fields(steps[name]) for name in sorted(steps)]
    assert [(s["down_revision"], s["revision"], s["phase"]) for s in chain] == [
        ("0037", builds.SYNTHETIC_EXPAND, "expand"),
        (builds.SYNTHETIC_EXPAND, builds.SYNTHETIC_CONTRACT, "contract"),
    ]
    for text in steps.values():
        assert text.count("lock_timeout = '5s'") >= 2  # upgrade and downgrade


@pytest.mark.slow
def test_once_a_release_exists_the_older_build_is_that_release(tmp_path: Path) -> None:
    """A clone of this repository where 1.0.0 was released and main moved on: the older build is
    made from the release's commit, not from HEAD (catches a lookup that is never used)."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(builds.ROOT), str(clone)], check=True, timeout=120)
    release = _commit(clone, "1.0.0", "release 1.0.0")
    _commit(clone, "1.1.0.dev0", "open 1.1.0")
    built = builds.older_build(tmp_path / "old", root=clone)
    assert built.name == f"release 1.0.0 ({release[:10]})"
    assert (tmp_path / "old" / "source" / VERSION).read_text().endswith('"1.0.0"\n')
    assert built.head == migration.head_revision()


@pytest.mark.parametrize(
    ("ci", "outcome"), [("true", pytest.fail.Exception), ("", pytest.skip.Exception)]
)
def test_a_shallow_clone_or_no_git_skips_and_fails_under_ci(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ci: str, outcome: type
) -> None:
    """Under CI=true what the mixed-version test needs is provided, so its absence fails."""
    monkeypatch.setenv("CI", ci)
    _commit(repo, "0.1.1", "a second commit, so that depth 1 is shallow")
    shallow = tmp_path / "shallow"
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", str(shallow))
    with pytest.raises(outcome, match="shallow clone"):
        builds.older_build(tmp_path / "old", root=shallow)
    monkeypatch.setattr(builds.shutil, "which", lambda name: None)
    with pytest.raises(outcome, match="no git"):
        builds.older_build(tmp_path / "old", root=repo)
