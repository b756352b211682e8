"""bench/fleet_cost.py: what bench/ab_cpu.py makes of its readings (issues 47 and 48's figures)."""

import pytest

from bench import fleet_cost


def test_lsn_bytes_reads_both_halves_of_a_wal_location() -> None:
    assert fleet_cost.lsn_bytes("0/0") == 0
    assert fleet_cost.lsn_bytes("0/10") == 16
    assert fleet_cost.lsn_bytes("1/0") == 1 << 32
    assert fleet_cost.lsn_bytes("16/B374D848") == 0x16 * (1 << 32) + 0xB374D848


def test_wal_per_job_takes_the_bytes_from_the_lsns_and_the_images_apart() -> None:
    before = fleet_cost.WalReading("0/1000000", records=100, fpi=7)
    after = fleet_cost.WalReading("0/1F00000", records=100 + 30 * 1000, fpi=7 + 50)
    # 0x1F00000 - 0x1000000 = 15,728,640 bytes over 1,000 jobs, 400,000 of them in images
    figures = fleet_cost.wal_per_job(before, after, fpi_bytes=400_000, jobs=1000)
    assert figures == {
        "wal_B": 15_728.64,
        "wal_noFPI_B": 15_328.64,
        "fpi": 0.05,
        "fpi_B": 400.0,
        "records": 30.0,
    }


def test_spans_read_both_record_formats() -> None:
    ours = "11 100.5 100.75\n12 101.0 101.25\n"  # bench.noop_job: run_id start end
    pgqueuer = "7 99.0 100.5 100.75\n8 - 101.0 101.25\n"  # bench.noop: ident due start end
    assert (
        fleet_cost.spans(ours) == fleet_cost.spans(pgqueuer) == [(100.5, 100.75), (101.0, 101.25)]
    )
    assert fleet_cost.jobs_per_second(ours) == pytest.approx(2 / 0.75)


def test_since_leaves_out_what_was_spent_before_the_first_job() -> None:
    total = {"A daemons": 900.0, "A server": 300.0, "A workers": 40.0}
    at_first = {"A daemons": 400.0, "A server": 100.0}
    assert fleet_cost.since(total, at_first) == {
        "A daemons": 500.0,
        "A server": 200.0,
        "A workers": 40.0,
    }
    assert fleet_cost.per_job({"A daemons": 500.0}, 4000) == {"A daemons": 0.125}


def test_quiet_warning_only_at_a_load_average_of_one_or_more() -> None:
    assert fleet_cost.quiet_warning("0.99 3.00 5.00") is None
    warning = fleet_cost.quiet_warning("1.00 0.20 0.10")
    assert warning is not None
    assert "1.00" in warning
    assert "rerun" in warning


def test_medians_are_per_figure_over_the_sittings_that_have_it() -> None:
    sittings = [{"A wal_B": 900.0, "A jobs/s": 10.0}, {"A wal_B": 1100.0}, {"A wal_B": 1000.0}]
    assert fleet_cost.medians(sittings) == {"A jobs/s": 10.0, "A wal_B": 1000.0}


def test_top_kinds_rank_by_record_and_image_bytes_per_job() -> None:
    kinds = {
        "Heap/INSERT": (2000, 300_000, 0),
        "Btree/INSERT_LEAF": (9000, 500_000, 100_000),
        "Transaction/COMMIT": (500, 20_000, 0),
    }
    assert fleet_cost.top_kinds(kinds, 1000, count=2) == (
        "Btree/INSERT_LEAF 9.0 (600 B), Heap/INSERT 2.0 (300 B)"
    )
