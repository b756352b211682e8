"""`status`'s line for the database's epoch (issue 32): each case it words."""

from scheduler_daemon.presentation import database_text


def test_a_primary_with_a_failover_seen() -> None:
    line = database_text(
        {
            "epoch_detection": "available",
            "system_identifier": "77",
            "timeline": 3,
            "in_recovery": False,
            "synchronous": True,
            "last_failover_seen_at": "2026-12-06T10:00:00+00:00",
        }
    )
    assert line == (
        "database: system 77, timeline 3, replication synchronous; "
        "last failover 2026-12-06T10:00:00+00:00"
    )


def test_a_standby_and_no_failover_seen() -> None:
    line = database_text(
        {
            "epoch_detection": "available",
            "system_identifier": "77",
            "timeline": None,
            "in_recovery": True,
            "synchronous": False,
            "last_failover_seen_at": None,
        }
    )
    assert line == (
        "database: system 77, a standby (in recovery), replication asynchronous or none; "
        "last failover none seen"
    )


def test_a_server_that_refuses_to_tell() -> None:
    line = database_text({"epoch_detection": "unavailable: permission denied for function"})
    assert line == "database epoch detection unavailable: permission denied for function"
