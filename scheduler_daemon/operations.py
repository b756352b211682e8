"""The operator actions that run one pass of a service by hand, outside any daemon: `recover`
(reconcile, and wait for takeovers), `prune` (history past retention) and `audit` (the recorded
history against the invariants). Each opens a one-connection pool of its own and closes it; the
CLI parses and prints around them."""

import dataclasses
import socket
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from scheduler_daemon.domain import timing
from scheduler_daemon.domain.audit import CHECK_NAMES, DEFAULT_SETTLE, AuditReport
from scheduler_daemon.domain.instance import new_instance_id
from scheduler_daemon.services.auditor import Auditor, TimeBound
from scheduler_daemon.services.partition_keeper import PartitionKeeper
from scheduler_daemon.services.pruner import Pruner, PruneReport
from scheduler_daemon.services.reconciler import Reconciler, ReconcileReport
from scheduler_daemon.settings import DaemonSettings
from scheduler_daemon.storage import instance_store, migration, partition_store
from scheduler_daemon.storage.database import Session, connect, make_pool
from scheduler_daemon.storage.epoch import EpochWatch


def recover(
    url: str,
    settings: DaemonSettings,
    *,
    dry_run: bool,
    wait: timedelta | None = None,
    on_wait: Callable[[list[dict[str, Any]], datetime], None] = lambda _runs, _until: None,
) -> tuple[ReconcileReport, list[dict[str, Any]]]:
    """One reconciliation pass for operators (`scheduler-daemon recover`), then the runs still
    running. With `wait`, waits that long at most for the takeover points of the runs whose
    owner stopped renewing and takes them over (Reconciler.wait_for_takeovers)."""
    connect(url).close()  # one line when the database is unreachable, not pool warnings
    # Its connection sights the server's epoch first, so that a promotion starts its quiet
    # period; a dry run writes nothing.
    epoch = None if dry_run else EpochWatch()
    pool = make_pool(url, max_size=1, name="scheduler-daemon recover", configure=epoch)
    pool.open(wait=True, timeout=10)
    try:
        instance_id = new_instance_id(f"recover@{socket.gethostname()}")
        reconciler = Reconciler.from_settings(pool, instance_id, settings)
        report = reconciler.run_once(dry_run=dry_run)
        if wait is None:
            return report, reconciler.inside_lease()
        return report, reconciler.wait_for_takeovers(wait, report, on_wait=on_wait)
    finally:
        pool.close()


def default_wait(url: str, settings: DaemonSettings) -> timedelta:
    """`recover --wait` without a limit: the largest takeover bound of the registered instances
    (this command's own settings when none is registered) plus the reconcile interval."""
    with Session(url) as session, session.transaction() as tx:
        instances = instance_store.list_instances(tx.conn)
    bounds = [
        timing.takeover_bound(i.lease_ttl, i.lease_grace, i.reconcile_interval)
        + i.reconcile_interval
        for i in instances
    ]
    return max(bounds, default=settings.takeover_bound + settings.reconcile_interval)


def prune(url: str, *, dry_run: bool) -> PruneReport:
    """Prunes all history past its retention, in the daemon's bounded batches (`prune`)."""
    connect(url).close()  # one line when the database is unreachable, not pool warnings
    pool = make_pool(url, max_size=1, name="scheduler-daemon prune")
    pool.open(wait=True, timeout=10)
    try:
        pruner = Pruner(pool, instance_id=new_instance_id(f"prune@{socket.gethostname()}"))
        return pruner.run_once(dry_run=dry_run, until_swept=True)
    finally:
        pool.close()


def audit(
    url: str,
    *,
    since: TimeBound | None = None,
    until: TimeBound | None = None,
    settle: timedelta = DEFAULT_SETTLE,
    checks: tuple[str, ...] = CHECK_NAMES,
) -> AuditReport:
    """One read-only audit of the recorded history (`scheduler-daemon audit`)."""
    # The recorded shape only: a constraint dropped by hand is what the audit may find out.
    verdict = migration.state(url, live=False).verdict
    if not verdict.ok:
        migration.raise_unless_compatible(
            dataclasses.replace(
                verdict, message=f"{verdict.message} (audit reads history this build understands)"
            )
        )
    pool = make_pool(url, max_size=1, name="scheduler-daemon audit")
    pool.open(wait=True, timeout=10)
    try:
        return Auditor(pool, settle=settle, checks=checks).run_once(since=since, until=until)
    finally:
        pool.close()


def partitions(url: str) -> list[dict[str, Any]]:
    """The history's partitions with their bounds and row estimates (`partitions`)."""
    with connect(url) as conn:
        return partition_store.partitions(conn)


def partition_upkeep(url: str) -> dict[str, Any]:
    """One partition upkeep, as a daemon's reconcile step does it (`partitions --upkeep`,
    `migrate`'s last step): the function's answer; UpkeepFailed when it gave up."""
    pool = make_pool(url, max_size=1, name="scheduler-daemon partitions")
    pool.open(wait=True, timeout=10)
    try:
        instance_id = new_instance_id(f"upkeep@{socket.gethostname()}")
        return PartitionKeeper(pool, instance_id=instance_id).run_once()
    finally:
        pool.close()
