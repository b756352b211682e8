"""The claim's two lanes (sql/functions/claim_launch.sql, ADR 0029) hold the same test: the
marked lane and the unmarked one differ only in the row's mark and the order of their index.
A condition added to one lane alone would let a build claim marked rows it knows by rules the
unmarked ones escape (or the other way round)."""

import re

from scheduler_daemon.storage.resource import resource_dir


def _lanes() -> tuple[list[str], list[str]]:
    text = (resource_dir("sql") / "functions" / "claim_launch.sql").read_text(encoding="utf-8")
    found = re.findall(r"SELECT id FROM \(\n(.*?)\) (marked|unmarked)\n", text, re.S)
    lanes = {name: body for body, name in found}
    assert set(lanes) == {"marked", "unmarked"}, found

    def lines(body: str) -> list[str]:
        return [line.strip() for line in body.splitlines() if not line.strip().startswith("--")]

    return lines(lanes["marked"]), lines(lanes["unmarked"])


def test_the_claims_two_lanes_differ_only_in_the_mark_and_the_index_order() -> None:
    marked, unmarked = _lanes()
    mark = "AND o.needs_build IS NOT NULL AND o.needs_build = ANY(p_known)"
    assert mark in marked
    assert "AND o.needs_build IS NULL" in unmarked
    order = "ORDER BY o.needs_build, o.attempts, o.scheduled_for, o.id"
    assert order in marked
    same = [
        line.replace(mark, "AND o.needs_build IS NULL").replace(
            order, "ORDER BY o.attempts, o.scheduled_for, o.id"
        )
        for line in marked
    ]
    assert same == unmarked
