"""Every exit code the docs, the systemd unit and the manifests mention is one docs/cli.md's table
defines, the table is what the code exits with, and no sentence about the schema names the code
of another failure. On 646db2b six places said a schema behind the build exits 1 (it exits 4)
and deploy.md said there is no downgrade (issue 29)."""

import re
from pathlib import Path

import pytest

from scheduler_daemon.cli.audit import EXIT_VIOLATIONS
from scheduler_daemon.cli.base import (
    EXIT_BAD_INPUT,
    EXIT_CONSOLE_UNAVAILABLE,
    EXIT_CONTRACT_BLOCKED,
    EXIT_RUN_NOT_SUCCESSFUL,
    EXIT_SCHEMA_BEHIND,
    EXIT_SCHEMA_SHAPE,
    EXIT_SCHEMA_TOO_NEW,
    EXIT_UNAVAILABLE,
    EXIT_UPKEEP_GAVE_UP,
)
from scheduler_daemon.runtime.supervision import (
    EXIT_FAILED_PASSES,
    EXIT_IN_PROCESS_STUCK,
    EXIT_IN_PROCESS_UNTRUSTED,
    EXIT_LEASE_KEEPER_FAILED,
)

ROOT = Path(__file__).resolve().parents[2]
CLI_MD = ROOT / "docs" / "cli.md"
# Where our own exit codes are spoken of. docs/explanation/executors.md is about the exit codes of
# jobs, not of scheduler-daemon, and is left out.
DOCUMENTS = sorted(
    {
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        *(ROOT / "docs").rglob("*.md"),
        *(ROOT / "deploy").rglob("*.service"),
        *(ROOT / "deploy").rglob("*.yaml"),
        ROOT / "deploy" / "Dockerfile",
    }
    - {ROOT / "docs" / "explanation" / "executors.md"}
)
# `exit 4`, `exits 1`, `exit code 2`, `exits with 3`, `Exit 5`, `RestartPreventExitStatus=5`; not
# inside backticks or quotes, where `exit code 3` is a job's recorded error.
MENTION = re.compile(
    r"(?<![`\"])\b(?:exit(?:s|ed)?(?: with)?(?: code| status)?|ExitStatus=)\s?(\d+)\b", re.I
)
SCHEMA = re.compile(r"\bschema\b", re.I)
SCHEMA_CODES = {EXIT_SCHEMA_BEHIND, EXIT_SCHEMA_TOO_NEW, EXIT_CONTRACT_BLOCKED, EXIT_SCHEMA_SHAPE}


def _table_codes() -> dict[int, str]:
    text = CLI_MD.read_text()
    section = text[text.index("\n## Exit codes\n") :]
    section = section[: section.index("\n## ", 1)]
    rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    return {int(row.split("|")[1]): row.split("|")[2].strip() for row in rows}


def _clause(text: str, start: int, end: int) -> str:
    """The clause around a mention: from the previous sentence or list boundary to the next one,
    where `, exit N` and `and exit N` also start a new clause."""
    boundary = re.compile(r"\.\s|;|\n\s*[-|#]|\n\n|,\s+(?=exit)|\band\s+(?=exit)|\|", re.I)
    before = [m.end() for m in boundary.finditer(text) if m.end() <= start]
    after = boundary.search(text, end)
    return text[before[-1] if before else 0 : after.start() if after else len(text)]


def _mentions() -> list[tuple[str, int, str]]:
    found = []
    for path in DOCUMENTS:
        text = path.read_text()
        if path == CLI_MD:  # the table itself is the definition
            table = text.index("\n## Exit codes\n")
            text = text[:table] + text[text.index("\n## ", table + 1) :]
        for match in MENTION.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(ROOT)}:{line}"
            found.append((where, int(match[1]), _clause(text, match.start(), match.end())))
    return found


def test_the_table_is_what_the_code_exits_with() -> None:
    codes = {
        EXIT_UNAVAILABLE,
        EXIT_VIOLATIONS,
        EXIT_BAD_INPUT,
        EXIT_FAILED_PASSES,
        EXIT_SCHEMA_BEHIND,
        EXIT_SCHEMA_TOO_NEW,
        EXIT_CONTRACT_BLOCKED,
        EXIT_LEASE_KEEPER_FAILED,
        EXIT_IN_PROCESS_STUCK,
        EXIT_IN_PROCESS_UNTRUSTED,
        EXIT_RUN_NOT_SUCCESSFUL,
        EXIT_CONSOLE_UNAVAILABLE,
        EXIT_SCHEMA_SHAPE,
        EXIT_UPKEEP_GAVE_UP,
    }
    assert set(_table_codes()) == {0, 130, *codes}
    assert "migrate" in _table_codes()[EXIT_SCHEMA_BEHIND]


def test_the_documents_mention_many_exit_codes() -> None:
    # The scan must see the documents it judges: a regex that matched nothing would pass below.
    files = {where.split(":")[0] for where, _, _ in _mentions()}
    assert len(_mentions()) > 40
    assert {"docs/operators/deploy.md", "deploy/systemd/scheduler-daemon.service"} <= files


@pytest.mark.parametrize(("where", "code", "clause"), _mentions())
def test_every_exit_code_mentioned_is_in_the_table(where: str, code: int, clause: str) -> None:
    assert code in _table_codes(), f"{where}: exit {code} is not in docs/cli.md's table"


@pytest.mark.parametrize(
    ("where", "code", "clause"), [m for m in _mentions() if SCHEMA.search(m[2])]
)
def test_a_sentence_about_the_schema_names_a_schema_exit_code(
    where: str, code: int, clause: str
) -> None:
    assert code in SCHEMA_CODES | {0}, f"{where}: exit {code} in {clause.strip()!r}"


def test_no_document_says_there_is_no_downgrade() -> None:
    for path in DOCUMENTS:
        assert "has no downgrade" not in path.read_text(), path
