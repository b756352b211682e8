"""Fixtures of the HA tier: a streaming pair per test, stopped and removed however the test ends."""

from collections.abc import Iterator

import pytest

from tests.ha.pair import ReplicationPair


@pytest.fixture
def pair() -> Iterator[ReplicationPair]:
    """A migrated primary and a streaming async standby (tests/ha/pair.py); skipped without
    server binaries, failed instead under CI=true."""
    pair = ReplicationPair()
    try:
        yield pair.start()
    finally:
        pair.close()
