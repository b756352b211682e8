"""Which holders of the budget's lock are not a daemon's claim, and how a holder is logged."""

from datetime import timedelta

from scheduler_daemon.domain.lock_holder import LockHolder, held_throughout, holder_fields


def holder(pid: int | None, vxid: str, seconds: float | None = None) -> LockHolder:
    return LockHolder(
        pid=pid,
        virtualtransaction=vxid,
        role="someone",
        application_name="psql",
        state=None,
        transaction_started_at=None,
        in_transaction=None if seconds is None else timedelta(seconds=seconds),
    )


def test_a_holder_is_long_only_if_the_same_transaction_holds_at_both_reads() -> None:
    # A daemon's claim holds for milliseconds: at the second read the lock is another claim's
    # (another pid, or the same session's next transaction), never the first one's.
    first = [holder(10, "3/7"), holder(11, "4/9"), holder(None, "-1/800")]
    second = [holder(10, "3/7", 2.0), holder(11, "4/10"), holder(12, "5/1"), holder(None, "-1/800")]
    assert held_throughout(first, second) == [holder(10, "3/7", 2.0), holder(None, "-1/800")]
    assert held_throughout([], second) == []
    assert held_throughout(first, []) == []


def test_the_log_fields_of_a_holder_and_of_none() -> None:
    assert holder_fields(holder(10, "3/7", 0.0)) == {
        "holder_pid": 10,
        "holder_role": "someone",
        "holder_application_name": "psql",
        "holder_state": None,
        "holder_in_transaction_seconds": 0.0,
        "holder_prepared": None,
    }
    assert set(holder_fields(None).values()) == {None}


def test_the_key_the_runbook_quotes_is_the_one_the_claims_lock() -> None:
    from pathlib import Path

    from scheduler_daemon.storage.fleet_store import BUDGET_LOCK_KEY

    runbook = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    section = runbook.split("\n## The budget lock\n", 1)[1].split("\n## ", 1)[0]
    assert f"pg_advisory_xact_lock({BUDGET_LOCK_KEY})" in section
    assert f"`classid` {BUDGET_LOCK_KEY >> 32}, `objid` {BUDGET_LOCK_KEY & 0xFFFFFFFF}" in section
