"""The notification fields of a task (pure): what validates, and the revision the refusal names."""

from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_daemon.domain import control
from scheduler_daemon.domain.status import DEFAULT_NOTIFY_ON, NOTIFY_ON_CHOICES, NotifyEvent
from scheduler_daemon.domain.task import InvalidTask, TaskSpec

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"


def _spec(**kw: object) -> TaskSpec:
    return TaskSpec(name="t", executor="shell", target="true", every=timedelta(hours=1), **kw)


def test_a_url_and_every_event_validate_and_a_deadline_is_held_to_the_retention() -> None:
    _spec(notify_url="http://h/n", notify_on=("failure", "deadline")).validate()
    assert tuple(NotifyEvent) == NOTIFY_ON_CHOICES
    assert set(DEFAULT_NOTIFY_ON) <= set(NOTIFY_ON_CHOICES)
    with pytest.raises(InvalidTask, match="unknown event 'later'"):
        _spec(notify_on=("later",)).validate()
    day = timedelta(days=1)
    _spec(deadline=day, history_retention=day).validate()
    with pytest.raises(InvalidTask, match="--deadline 2d is longer than the history retention"):
        _spec(deadline=2 * day, history_retention=day).validate()
    with pytest.raises(InvalidTask, match=r"retention \(1d\)"):
        _spec(deadline=2 * day).check_deadline(day)  # the fleet's
    _spec(deadline=2 * day).check_deadline(None)  # no retention: kept for ever


@pytest.mark.parametrize("url", ["ftp://h/n", "h/n", "http:// space", "https://"])
def test_a_notify_url_must_be_http_or_https(url: str) -> None:
    with pytest.raises(InvalidTask, match="--notify needs an http:// or https:// URL"):
        _spec(notify_url=url).validate()


def test_the_refusal_names_each_older_instance() -> None:
    assert control.plan_notify("task 't'", []) is None
