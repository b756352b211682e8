"""Fixtures of the HA tier: a streaming pair or a Patroni cluster per test, stopped and removed
however the test ends."""

from collections.abc import Iterator

import pytest

from tests.ha.pair import ReplicationPair, running_pair
from tests.ha.patroni import PatroniCluster


@pytest.fixture
def pair() -> Iterator[ReplicationPair]:
    """A migrated primary and a streaming async standby (tests/ha/pair.py); skipped without
    server binaries, failed instead under CI=true."""
    yield from running_pair()


@pytest.fixture
def patroni() -> Iterator[PatroniCluster]:
    """One etcd and two Patroni-managed nodes, the database migrated (tests/ha/patroni.py);
    skipped without patroni, etcd or server binaries, failed instead under CI=true. Everything
    it started is stopped and its directory removed however the test ends."""
    cluster = PatroniCluster()
    try:
        yield cluster.start()
    finally:
        print(cluster.log())  # shown by pytest when the test failed
        cluster.close()
