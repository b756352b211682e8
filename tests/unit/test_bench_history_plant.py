"""bench/history_plant.py: the planted history's shape, and what bench/history_scale.py reads from
plans (issue 47's figures at scale). Nothing here is timed."""

import argparse
import re
from datetime import UTC, datetime, timedelta

import pytest

from bench import history_plant as hp

NOW = datetime(2026, 12, 8, 13, 45, 7, tzinfo=UTC)
DAY = timedelta(days=1)


def test_pair_reads_rows_and_partitions_and_refuses_what_cannot_be_planted() -> None:
    assert hp.pair("10000,4") == (10_000, 4)
    assert hp.pair("10_000_000,400") == (10_000_000, 400)
    for bad in ("10000", "10000,0", "3,4", "a,b", "1,2,3", "-5,1"):
        with pytest.raises(argparse.ArgumentTypeError):
            hp.pair(bad)


def test_ranges_end_at_the_current_interval_start_oldest_first_without_gaps() -> None:
    end = hp.interval_start(NOW, DAY)
    assert end == datetime(2026, 12, 8, tzinfo=UTC)
    assert hp.interval_start(NOW, timedelta(hours=6)) == datetime(2026, 12, 8, 12, tzinfo=UTC)
    ranges = hp.bounds(end, 3, DAY)
    assert ranges == [
        (datetime(2026, 12, 5, tzinfo=UTC), datetime(2026, 12, 6, tzinfo=UTC)),
        (datetime(2026, 12, 6, tzinfo=UTC), datetime(2026, 12, 7, tzinfo=UTC)),
        (datetime(2026, 12, 7, tzinfo=UTC), end),
    ]


def test_spread_shares_every_row_and_no_partition_gets_two_more_than_another() -> None:
    assert hp.spread(10, 4) == [3, 3, 2, 2]
    assert hp.spread(10_000_000, 400) == [25_000] * 400
    shares = hp.spread(1_000_003, 7)
    assert sum(shares) == 1_000_003
    assert max(shares) - min(shares) == 1


def test_partitions_are_named_as_the_upkeep_names_them() -> None:
    lower = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
    assert hp.partition_name("occurrence", lower) == "occurrence_p202601020304"
    assert hp.DATED.findall("Index Scan using x on run_p202601020304 r") == ["run_p202601020304"]


def test_partitioned_plant_fills_each_dated_table_then_attaches_it_over_its_own_range() -> None:
    plan = hp.Plan(rows=10, partitions=3, tasks=4)
    end = hp.interval_start(NOW, DAY)
    statements = hp.plant_statements(plan, end, partitioned=True, id_base=100, run_base=50)
    text = "\n".join(statements)
    for lo, hi in hp.bounds(end, 3, DAY):
        for table in ("occurrence", "run"):
            name = hp.partition_name(table, lo)
            created = statements.index(
                f"CREATE TABLE {name} (LIKE {table} INCLUDING DEFAULTS INCLUDING CONSTRAINTS)"
            )
            attach = next(i for i, s in enumerate(statements) if f"PARTITION {name} " in s)
            assert created < attach
            assert (
                f"FROM ('{lo.isoformat()}'::timestamptz) TO ('{hi.isoformat()}'"
                in (statements[attach])
            )
    # the rows' ranges of g cover 1..10 once, 4 + 3 + 3
    ranges = re.findall(r"generate_series\((\d+), (\d+)\)", text)
    assert [(int(a), int(b)) for a, b in ranges[1:]] == [(1, 4), (5, 7), (8, 10)]
    # the stale task's one outcome goes into the oldest partition, with the id after the rows
    stale = next(s for s in statements if f"name = '{hp.STALE_TASK}'" in s)
    assert hp.partition_name("occurrence", end - 3 * DAY) in stale
    assert "SELECT 111," in stale
    assert "setval(pg_get_serial_sequence('occurrence', 'id'), 111)" in text
    assert "firing_key" not in text
    assert statements[-1] == "VACUUM ANALYZE"


def test_unpartitioned_plant_writes_the_same_rows_into_the_tables_themselves() -> None:
    plan = hp.Plan(rows=10, partitions=3, tasks=4)
    end = hp.interval_start(NOW, DAY)
    text = "\n".join(
        hp.plant_statements(plan, end, partitioned=False, id_base=0, run_base=0, firing_key=True)
    )
    assert "ATTACH" not in text
    assert "CREATE TABLE" not in text
    assert "INSERT INTO occurrence (" in text
    assert "INSERT INTO run (" in text
    assert "INSERT INTO firing_key" in text


def test_buffers_are_read_from_the_top_node_and_the_planning() -> None:
    text = (
        "Query Text: SELECT 1\nLimit  (actual rows=1 loops=1)\n"
        "  Buffers: shared hit=12 read=3 dirtied=1\n"
        "  ->  Index Scan using k on occurrence_active o\n        Buffers: shared hit=9 read=3\n"
    )
    assert hp.statement_buffers(text) == 15
    assert hp.statement_buffers("Result  (actual rows=1 loops=1)") == 0
    plan = {
        "Plan": {"Shared Hit Blocks": 40, "Shared Read Blocks": 2, "Plans": []},
        "Planning": {"Shared Hit Blocks": 7},
    }
    assert hp.plan_buffers(plan) == 49
    assert hp.dated([text, "Seq Scan on occurrence_p202601010000"]) == ["occurrence_p202601010000"]


def test_the_retention_set_before_a_drop_puts_that_partition_alone_past_it() -> None:
    upper = datetime(2026, 11, 1, tzinfo=UTC)
    kept = hp.retention_past(NOW, upper)
    assert kept == timedelta(days=37, hours=13, minutes=45)
    assert NOW - kept >= upper
    assert NOW - kept < upper + timedelta(minutes=1)
    with pytest.raises(ValueError, match="after"):
        hp.retention_past(upper, NOW)
    assert hp.ratio(3.0, 2.0) == "1.500"
    assert hp.ratio(1.0, 0.0) == "-"


def test_wal_is_summed_by_the_relation_of_each_records_first_block() -> None:
    dump = (
        "rmgr: Heap        len (rec/tot):     54/  7902, tx: 7, lsn: 0/01, prev 0/00, desc: "
        "INSERT off 3, blkref #0: rel 1663/5/16400 blk 0 FPW\n"
        "rmgr: Heap        len (rec/tot):     59/    59, tx: 7, lsn: 0/02, prev 0/01, desc: "
        "DELETE off 4, blkref #0: rel 1663/5/16400 blk 9\n"
        "rmgr: Btree       len (rec/tot):     64/    64, tx: 7, lsn: 0/03, prev 0/02, desc: "
        "INSERT_LEAF off 2, blkref #0: rel 1663/5/16999 blk 1\n"
        "rmgr: Transaction len (rec/tot):    130/   130, tx: 7, lsn: 0/04, prev 0/03, desc: "
        "COMMIT 2026-12-08\n"
        "pg_waldump: error: error in WAL record at 0/05\n"
    )
    assert hp.wal_by_relation(dump, {"16400": "firing_key"}) == [
        ("firing_key", 7961),
        ("(no block)", 130),
        ("dropped 16999", 64),
    ]
