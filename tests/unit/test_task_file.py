"""The task file format (pure): parse and render round trip, references, masks, and the
latest-outcome rule of backfill planning."""

from datetime import UTC, datetime, timedelta

import pytest

from scheduler_daemon.domain import backfill
from scheduler_daemon.domain.task import InvalidTask, TaskSpec
from scheduler_daemon.domain.task_file import parse, render

AT = datetime(2030, 1, 1, 9, tzinfo=UTC)


def test_render_then_parse_gives_the_same_definitions() -> None:
    specs = [
        TaskSpec(
            name="a b",
            executor="shell",
            target='echo "x"',
            cron="0 2 * * *",
            timezone="Europe/Berlin",
            misfire_grace=timedelta(minutes=5),
            paused=True,
        ),
        TaskSpec(
            name="h",
            executor="http",
            target="https://x.example/",
            every=timedelta(hours=1),
            headers=(("X-Team", "ops"),),
            max_attempts=3,
            history_retention=timedelta(days=7),
        ),
        TaskSpec(name="once", executor="python", target="m:f", at=AT),
    ]
    assert list(parse(render(specs), {}).values()) == specs


def test_references_resolve_from_the_environment_and_render_back() -> None:
    text = (
        '[h]\nhttp = "https://x.example"\nevery = 60\n'
        'headers = { Authorization = "Bearer ${SCHEDULER_SECRET_T}" }\n'
    )
    (spec,) = parse(text, {"SCHEDULER_SECRET_T": "secret"}).values()
    assert spec.headers == (("Authorization", "Bearer secret"),)
    assert spec.every == timedelta(seconds=60)
    assert "Bearer ${SCHEDULER_SECRET_T}" in render([spec])
    assert "secret" not in render([spec])
    assert "Bearer secret" in render([spec], include_secrets=True)
    with pytest.raises(InvalidTask, match="environment variable SCHEDULER_SECRET_T, unset"):
        parse(text, {})


def test_a_secret_without_a_reference_renders_masked() -> None:
    spec = TaskSpec(
        name="h",
        executor="http",
        target="https://u:pw@x.example",
        every=timedelta(hours=1),
        headers=(("Authorization", "Bearer x"),),
    )
    text = render([spec])
    assert '"Authorization" = "***"' in text
    assert "pw" not in text


def test_the_newest_row_of_a_firing_decides_its_outcome() -> None:
    t = [AT + timedelta(hours=h) for h in range(4)]
    rows = [
        backfill.Recorded(t[0], None, 1, "failed", "schedule"),
        backfill.Recorded(t[0], None, 5, "success", "backfill"),
        backfill.Recorded(t[1], t[2], 2, "skipped", "schedule"),
    ]
    firings = backfill.classify(t, rows)
    assert [(f.outcome, f.backfilled) for f in firings] == [
        ("success", True),
        ("skipped", False),
        ("skipped", False),
        ("missing", False),
    ]
    assert [f.wanted(backfill.DEFAULT_INCLUDE) for f in firings] == [False, True, True, True]
    with pytest.raises(backfill.InvalidBackfill):
        backfill.parse_include("failed,never")
