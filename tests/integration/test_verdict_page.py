"""The console's verdict filter (`Client.verdict_page`, ADR 0023): the tasks judged a verdict,
by name, judging at most a bounded number of tasks per page, a batch at a time; paging on finds
every match exactly once, in order, and a page never judges more than its bound."""

import pytest

from scheduler_daemon.client import health as health_client
from scheduler_daemon.domain.argument import InvalidArgument
from tests.support import shell_task


@pytest.fixture
def fleet(client) -> list[str]:
    """23 tasks; every third one paused. Returns the paused names in byte order."""
    paused = []
    for n in range(23):
        name = f"t{n:02d}" if n % 5 else f"T{n:02d}"  # upper case sorts first in byte order
        task = shell_task(client, name)
        if n % 3 == 0:
            client.pause(task.id)
            paused.append(name)
    return sorted(paused, key=str.encode)


@pytest.mark.parametrize("sizes", [(3, 7, 2), (2, 100, 4), (50, 5, 1000)])
def test_paging_on_finds_every_match_once_in_name_order_within_the_bound(
    client, fleet, monkeypatch, sizes
) -> None:
    # Would catch a page that judged the whole fleet (judged > bound) or a cursor after the bound
    # that skipped or repeated a task. sizes: (page limit, tasks judged at most, batch).
    limit, bound, batch = sizes
    monkeypatch.setattr(health_client, "JUDGE_BATCH", batch)
    seen: list[str] = []
    after = None
    pages = 0
    while True:
        page = client.verdict_page("paused", limit=limit, judge_at_most=bound, after=after)
        pages += 1
        assert page.judged <= bound
        assert len(page.rows) <= limit
        assert all(r.health.verdict == "paused" for r in page.rows)
        seen += [r.name for r in page.rows]
        if page.after is None:
            break
        after = page.after
        assert pages < 50
    assert seen == fleet
    # the bound makes pages: 23 tasks judged at most `bound` a page
    assert pages >= -(-23 // bound)


def test_healthy_tasks_are_not_shown_as_paused_and_a_bad_verdict_is_refused(client, fleet) -> None:
    page = client.verdict_page("healthy", limit=100, judge_at_most=1000)
    assert page.after is None
    assert page.judged == 23
    assert {r.name for r in page.rows}.isdisjoint(fleet)
    assert len(page.rows) == 23 - len(fleet)
    with pytest.raises(InvalidArgument):
        client.verdict_page("sick", limit=10, judge_at_most=10)
