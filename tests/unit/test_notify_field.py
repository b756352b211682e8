"""The notification fields of a task (pure): what validates."""

from datetime import timedelta

import pytest

from scheduler_daemon.domain import task_file
from scheduler_daemon.domain.status import DEFAULT_NOTIFY_ON, NOTIFY_ON_CHOICES, NotifyEvent
from scheduler_daemon.domain.task import InvalidTask, TaskSpec


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


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("ftp://h/n", "needs an http:// or https:// URL"),
        ("h/n", "needs an http:// or https:// URL"),
        ("http:// space", "must not contain whitespace"),
        ("https://", "needs a host"),
    ],
)
def test_a_notify_url_must_be_http_or_https(url: str, reason: str) -> None:
    with pytest.raises(InvalidTask, match=f"--notify {reason}"):
        _spec(notify_url=url).validate()


def test_notify_headers_follow_the_http_executors_header_rules() -> None:
    """One home for the rules (task.check_headers, bound_headers): each refusal names the
    option, never the value."""
    url = {"notify_url": "https://h/n"}
    _spec(**url, notify_headers=(("Authorization", "Bearer x"), ("X-Team", "ops"))).validate()
    for headers, message in [
        ((("X-A", "a\0b"),), "--notify-header X-A must not contain U\\+0000"),
        ((("Content-Type", "x"),), "--notify-header Content-Type is set by the deliverer itself"),
        ((("X-A", "1"), ("x-a", "2")), "--notify-header x-a is given twice"),
        ((("X-A", "a" * 65536),), "the headers are 65547 bytes; the limit is 65536 bytes"),
    ]:
        with pytest.raises(InvalidTask, match=message):
            _spec(**url, notify_headers=headers).validate()
    with pytest.raises(InvalidTask, match="--notify-header needs --notify"):
        _spec(notify_headers=(("X-Team", "ops"),)).validate()


def test_clearing_the_notify_url_clears_the_headers_given_with_it() -> None:
    spec = _spec(
        notify_url="https://h/n",
        notify_headers=(("Authorization", "${SCHEDULER_SECRET_T}"),),
        notify_header_refs=(("Authorization", "${SCHEDULER_SECRET_T}"),),
    )
    cleared = spec.with_changes(notify_url=None)
    assert (cleared.notify_headers, cleared.notify_header_refs) == ((), ())
    moved = spec.with_changes(notify_url="https://other/n")
    assert moved.notify_headers == spec.notify_headers
    given = spec.with_changes(notify_headers=(("X-Team", "ops"),))
    assert given.notify_header_refs == ()


def test_a_task_file_reads_notify_headers_with_references_and_export_writes_them_back() -> None:
    text = (
        '[t]\ncommand = "true"\nevery = "1h"\nnotify = "https://h/n"\n'
        'notify-headers = { Authorization = "Bearer ${SCHEDULER_SECRET_T}", X-Team = "ops" }\n'
    )
    (spec,) = task_file.parse(text, {"SCHEDULER_SECRET_T": "s3cret"}).values()
    assert dict(spec.notify_headers) == {"Authorization": "Bearer s3cret", "X-Team": "ops"}
    assert dict(spec.notify_header_refs) == {"Authorization": "Bearer ${SCHEDULER_SECRET_T}"}
    rendered = task_file.render([spec])
    assert "s3cret" not in rendered
    (again,) = task_file.parse(rendered, {"SCHEDULER_SECRET_T": "s3cret"}).values()
    assert again == spec
    with pytest.raises(InvalidTask, match="field 'notify-headers': header Authorization needs"):
        task_file.parse(text, {})
