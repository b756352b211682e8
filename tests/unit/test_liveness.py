"""`status`'s instance states and its warning for queued work no live instance runs (pure)."""

from datetime import timedelta

import pytest

from scheduler_daemon.domain.liveness import InstanceState, instance_state, unserved_queue_warning

TTL, GRACE, RECONCILE = timedelta(seconds=30), timedelta(seconds=10), timedelta(seconds=5)


def _state(silent: float, *, stopping: bool = False) -> InstanceState:
    return instance_state(
        timedelta(seconds=silent),
        lease_ttl=TTL,
        lease_grace=GRACE,
        reconcile_interval=RECONCILE,
        stopping=stopping,
    )


@pytest.mark.parametrize(
    ("silent", "stopping", "expected"),
    [
        (0, False, InstanceState.LIVE),
        (30, False, InstanceState.LIVE),  # its lease ends only after the TTL
        (30.001, False, InstanceState.SILENT),
        (45, False, InstanceState.SILENT),  # the takeover bound: TTL + grace + reconcile
        (45.001, False, InstanceState.PAST_TAKEOVER),
        (0, True, InstanceState.DRAINING),
        (30.001, True, InstanceState.SILENT),  # a draining instance that died is silent
        (600, True, InstanceState.PAST_TAKEOVER),
    ],
)
def test_an_instance_state_follows_its_silence_against_its_own_lease_settings(
    silent: float, stopping: bool, expected: InstanceState
) -> None:
    assert _state(silent, stopping=stopping) == expected


def test_each_state_has_the_words_of_the_text_output() -> None:
    assert [s.text for s in InstanceState] == [
        "live",
        "draining",
        "silent past its lease",
        "past the takeover bound",
    ]


def test_no_warning_without_queued_work_or_with_a_live_instance() -> None:
    assert unserved_queue_warning(0, []) is None
    assert unserved_queue_warning(4, [InstanceState.SILENT, InstanceState.LIVE]) is None


def test_queued_work_with_no_live_instance_is_warned_of_with_what_is_registered() -> None:
    assert unserved_queue_warning(4, []) == (
        "4 queued occurrence(s) and no live instance to run them (no instance is registered); "
        "start `scheduler-daemon run`"
    )
    states = [InstanceState.DRAINING, InstanceState.SILENT, InstanceState.SILENT]
    warning = unserved_queue_warning(1, states)
    assert warning is not None
    assert "(the registered are 1 draining, 2 silent past its lease)" in warning
