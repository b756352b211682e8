"""The daemon's column grants follow the schema's compatibility window (storage/roles.py): a
column a later build stops writing is granted while any admitted build still writes it, and
dropped by the `db roles` after the contract that raises the oldest admitted build past it."""

import pytest

from scheduler_daemon.domain.schema_compat import Build, Step
from scheduler_daemon.storage import migration, roles

CHAIN = Build(
    (
        Step("0003", "baseline"),
        Step("0004", "expand"),
        Step("0005", "contract"),
        Step("0006", "expand"),
        Step("0007", "contract"),
    )
)


def test_a_column_stays_granted_until_no_admitted_build_writes_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(
        roles.COLUMNS,
        "daemon",
        {"task": (roles.Column("status"), roles.Column("old_mark", last_build="0006"))},
    )
    # 0006 and older builds wrote old_mark: granted while the schema admits any of them.
    assert roles.updated_columns("daemon", "task", "0005", CHAIN) == ("status", "old_mark")
    assert roles.updated_columns("daemon", "task", "0006", CHAIN) == ("status", "old_mark")
    # The contract 0007 raised the oldest admitted build past 0006: the next `db roles` drops it.
    assert roles.updated_columns("daemon", "task", "0007", CHAIN) == ("status",)
    assert roles.updated_columns("operator", "task", "0005", CHAIN) is None  # the whole table


def test_the_widest_window_is_the_oldest_build_before_this_builds_pending_contract() -> None:
    assert roles.widest_window(CHAIN) == "0005"  # 0007 may still be pending
    build = migration.build()
    assert roles.widest_window() == build.oldest_build_at(build.needs)


def test_no_column_is_written_by_a_build_this_one_does_not_know() -> None:
    build = migration.build()
    for tables in roles.COLUMNS.values():
        for columns in tables.values():
            for column in columns:
                assert column.last_build is None or build.knows(column.last_build), column
