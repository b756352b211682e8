"""The tree as documented and within its size: CONTRIBUTING.md's layout names only what exists and
names every package of scheduler_daemon/; no module is over 500 lines and no function over 60
(STYLE.md "Keep out"; issue 30). Pure file reading."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[2]
PACKAGE = ROOT / "scheduler_daemon"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60

# An entry of the layout: a name ending in `/` or `.py` at the start of a line, indented by
# two spaces per level; its description (and any line indented past DESCRIPTION) follows it.
_ENTRY = re.compile(r"^( {0,8})([\w.]+/|\w+\.py)(?= |$)")
_DESCRIPTION = 16
# A path its description names: `output.py`, `tests/unit/test_pacing.py`, `kubernetes/`.
_PATH = re.compile(r"(?<![\w./-])(\w+(?:/\w+)*(?:\.py|/))(?![\w/-])")
# A test module an entry under tests/ names without its `.py` (`test_dispatcher`).
_TEST_MODULE = re.compile(r"(?<![\w.…])(test_\w+)\b(?!\.py)")


def _layout() -> list[str]:
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text.split("\n## Layout\n", 1)[1]
    return section.split("```\n", 2)[1].splitlines()


def _entries() -> list[tuple[Path, str]]:
    """Each entry's path (from the repository's root) and its description."""
    entries: list[tuple[Path, str]] = []
    stack: list[str] = []
    for line in _layout():
        found = _ENTRY.match(line)
        if found and len(found[1]) < _DESCRIPTION:
            depth = len(found[1]) // 2
            stack = [*stack[:depth], found[2].rstrip("/")]
            entries.append((Path(*stack), line[found.end() :]))
        else:
            assert entries, line
            assert line.startswith(" " * _DESCRIPTION), line  # a description's next line
            path, description = entries[-1]
            entries[-1] = (path, description + "\n" + line)
    return entries


def _named_paths() -> list[tuple[Path, str]]:
    """(the entry, a path it names) for every path named in a description."""
    return [(path, named) for path, text in _entries() for named in _PATH.findall(text)]


def _exists(entry: Path, named: str) -> bool:
    """Whether `named` exists beside or inside the entry, from the root, or in the package."""
    here = entry if (ROOT / entry).is_dir() else entry.parent
    return any((base / named.rstrip("/")).exists() for base in (ROOT / here, ROOT, PACKAGE))


def test_every_entry_of_the_contributing_layout_exists() -> None:
    missing = [str(path) for path, _ in _entries() if not (ROOT / path).exists()]
    assert missing == []


def test_every_module_a_layout_entry_names_exists() -> None:
    # Would fail against a layout that still named `client.py` once it became a package.
    missing = [f"{entry}: {named}" for entry, named in _named_paths() if not _exists(entry, named)]
    assert missing == []
    tests = [
        f"{entry}: {name}"
        for entry, text in _entries()
        if entry.parts[0] == "tests"
        for name in _TEST_MODULE.findall(text)
        if not (ROOT / entry / f"{name}.py").exists() and not (ROOT / f"{name}.py").exists()
    ]
    assert tests == []


def test_the_layout_names_every_package_and_every_module_of_the_services_and_executors() -> None:
    entries = {path for path, _ in _entries()}
    packages = {p.parent.relative_to(ROOT) for p in PACKAGE.rglob("__init__.py")}
    assert packages - {Path("scheduler_daemon")} - entries == set()
    named = {(entry, Path(path).name) for entry, path in _named_paths()}
    for package in ("services", "executors", "client", "domain/schedule"):
        entry = Path("scheduler_daemon", package)
        modules = {p.name for p in (ROOT / entry).glob("*.py") if p.name != "__init__.py"}
        assert modules - {name for at, name in named if at == entry} == set(), package


def _sizes() -> tuple[list[str], list[str]]:
    modules, functions = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        where = path.relative_to(ROOT)
        if (lines := len(source.splitlines())) > MAX_MODULE_LINES:
            modules.append(f"{where}: {lines} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                length = node.end_lineno - node.lineno + 1  # from `def`, decorators aside
                if length > MAX_FUNCTION_LINES:
                    functions.append(f"{where}:{node.lineno} {node.name}: {length} lines")
    return modules, functions


def test_no_module_of_the_package_is_over_500_lines() -> None:
    modules, _ = _sizes()
    assert modules == []


def test_no_function_of_the_package_is_over_60_lines() -> None:
    _, functions = _sizes()
    assert functions == []
