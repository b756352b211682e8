"""The named-query loader: parsing, duplicates, and that every query is used exactly once."""

import re
from pathlib import Path

import pytest

from scheduler_daemon.storage.query import QUERIES, QueryError, load, parse

PACKAGE = Path(__file__).resolve().parents[2] / "scheduler_daemon"


def test_a_file_parses_into_named_queries_with_cardinality_and_doc() -> None:
    text = "-- name: a_get :one\n-- Gets a.\nSELECT 1\n\n-- name: a_all :many\nSELECT 2;\n"
    first, second = parse(text, "a.sql")
    assert (first.name, first.cardinality, first.doc, first.sql) == (
        "a_get",
        "one",
        "Gets a.",
        "SELECT 1",
    )
    assert (second.name, second.cardinality, second.sql) == ("a_all", "many", "SELECT 2")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: x :lots\nSELECT 1", "unknown cardinality"),
        ("-- name: x :one\n", "has no statement"),
        ("SELECT 1\n-- name: x :one\nSELECT 1", "before the first"),
    ],
)
def test_malformed_query_files_are_refused(text: str, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse(text, "bad.sql")


def test_a_name_defined_twice_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text("-- name: dup :one\nSELECT 1\n")
    (tmp_path / "b.sql").write_text("-- name: dup :one\nSELECT 2\n")
    with pytest.raises(QueryError, match=r"dup is defined in a.sql and b.sql"):
        load(tmp_path)


def test_a_fragment_is_written_once_and_included_by_the_statements_of_any_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "a.sql").write_text("-- fragment: cols\n-- The columns.\nid, name\n")
    (tmp_path / "b.sql").write_text(
        "-- name: x_get :one\n-- One.\nSELECT {{cols}} FROM x\n\n"
        "-- name: x_list :many\n-- All.\nSELECT {{cols}}, extra FROM x\n"
    )
    found = load(tmp_path)
    assert set(found) == {"x_get", "x_list"}  # a fragment is no statement
    assert found["x_get"].sql == "SELECT id, name FROM x"
    assert found["x_list"].sql == "SELECT id, name, extra FROM x"


def test_a_fragment_may_include_another(tmp_path: Path) -> None:
    (tmp_path / "a.sql").write_text(
        "-- fragment: outer\ngreatest(a, {{inner}})\n\n-- fragment: inner\n(SELECT 1)\n\n"
        "-- name: x_get :one\nSELECT {{outer}} FROM x\n"
    )
    assert load(tmp_path)["x_get"].sql == "SELECT greatest(a, (SELECT 1)) FROM x"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-- name: x_get :one\nSELECT {{nope}} FROM x\n", "unknown fragment {{nope}}"),
        (
            "-- fragment: a\n{{b}}\n\n-- fragment: b\n{{a}}\n\n-- name: x :one\nSELECT {{a}}\n",
            "fragment(s) a, b include themselves",
        ),
        ("-- fragment: cols\nid\n\n-- name: x_get :one\nSELECT 1\n", "included by no statement"),
    ],
)
def test_an_unknown_or_unused_fragment_is_refused(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "a.sql").write_text(text)
    with pytest.raises(QueryError, match=re.escape(message)):
        load(tmp_path)


def test_every_query_is_run_by_exactly_one_place_in_the_package() -> None:
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    uses = {name: len(re.findall(rf'"{name}"', source)) for name in QUERIES}
    assert {n: c for n, c in uses.items() if c != 1} == {}


def test_every_name_a_store_runs_is_a_loaded_query() -> None:
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    run_calls = set(re.findall(r'query\.run\(\s*conn,\s*"([a-z0-9_]+)"', source))
    assert run_calls, "the pattern found no query.run calls; the test would pass vacuously"
    assert run_calls - set(QUERIES) == set()


def test_queries_take_named_placeholders_only() -> None:
    for query in QUERIES.values():
        assert not re.search(r"%s(?!\w)", query.sql), query.name
        assert "{" not in query.sql, query.name
