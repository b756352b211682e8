"""sql/functions: one file per live function, each the one home of its text (ADR 0028)."""

import re
from pathlib import Path

import pytest

from scheduler_daemon.storage import functions

ROOT = Path(__file__).resolve().parents[2]
SQL = ROOT / "sql"
FOLDER = SQL / "functions"
# A versioned function of ours, wherever it is named: `sd_claim_launch_v6`.
_CALLED = re.compile(r"\bsd_[a-z0-9_]+_v[0-9]+\b")


def _called() -> set[str]:
    """Every versioned function the named queries and the function files call."""
    sources = [p for p in SQL.glob("*.sql") if p.name != "schema.sql"] + list(FOLDER.glob("*.sql"))
    names: set[str] = set()
    for path in sources:
        code = "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())
        names |= set(_CALLED.findall(code))
    return names


def test_every_function_the_queries_call_is_created_by_exactly_one_file() -> None:
    """Catches a query moved to a new `_vN` whose text stayed in a migration, and a function
    defined in two files (which would then be re-created twice, the last one winning)."""
    called = _called()
    created = [f.name for f in functions.files(FOLDER)]
    assert {"sd_claim_launch_v6", "sd_succeed_runs_v4", "sd_show_outcomes_v1"} <= called
    assert sorted(n for n in created if n in called) == sorted(called)
    assert len(created) == len(set(created))


def test_every_file_creates_the_one_function_its_name_names() -> None:
    """Catches a file that creates no function, two, or one whose name (without `sd_` and the
    version) is not the file's: `claim_launch.sql` holds `sd_claim_launch_vN`."""
    found = functions.files(FOLDER)
    assert sorted(p.name for p in FOLDER.iterdir()) == [f.file for f in found]
    for each in found:
        assert each.text.count("CREATE OR REPLACE FUNCTION") == 1, each.file
        assert each.text.startswith(f"-- {each.name}: "), f"{each.file}: header names it first"
        bare = re.sub(r"^sd_|_v[0-9]+$", "", each.name)
        assert f"{bare}.sql" == each.file


def test_a_files_signature_is_its_argument_types_as_the_catalog_reads_them() -> None:
    by_file = {f.file: f for f in functions.files(FOLDER)}
    assert by_file["claim_launch.sql"].signature == (
        "sd_claim_launch_v6(bigint, integer, text, interval, interval, text, text[], timestamptz)"
    )
    assert by_file["end_pause.sql"].signature == (
        "sd_end_pause_v1(bigint, timestamptz, text, text)"
    )
    assert by_file["task_event_record.sql"].signature == "task_event_record()"


def test_a_file_creating_two_functions_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "two.sql"
    path.write_text(
        "CREATE OR REPLACE FUNCTION a() RETURNS int LANGUAGE sql AS 'SELECT 1';\n"
        "CREATE OR REPLACE FUNCTION b() RETURNS int LANGUAGE sql AS 'SELECT 2';\n"
    )
    with pytest.raises(RuntimeError, match="creates 2 functions, not one"):
        functions.read(path)


def test_an_install_without_the_files_is_refused_not_silently_skipped(tmp_path: Path) -> None:
    """Catches a wheel built without sql/functions: `migrate` would otherwise find nothing to
    compare and leave every function as it is."""
    with pytest.raises(FileNotFoundError, match="without its sql/functions/ files"):
        functions.files(tmp_path)


def test_the_record_changes_with_the_file_and_with_the_definition() -> None:
    each = functions.files(FOLDER)[0]
    edited = functions.FunctionFile(each.file, each.name, each.signature, each.text + "\n")
    assert each.record("def") == each.record("def")
    assert each.record("def") != edited.record("def")
    assert each.record("def") != each.record("def by hand")
    assert each.record("def").startswith(f"from sql/functions/{each.file} sha256:{each.checksum}")
