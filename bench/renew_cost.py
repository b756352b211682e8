"""The renewal statement of two trees, over the same held runs: server time per renewal pass.

    python bench/renew_cost.py OLD_RUN_SQL [--runs 8] [--passes 3000] [--rounds 5]

OLD_RUN_SQL is the other tree's sql/run.sql (`git show main:sql/run.sql > /tmp/old.sql`). One
database migrated to this tree's head holds `--runs` running runs of one owner, none followed;
it sends `run_renew` of the old file and of this tree `--passes` x `--rounds` times each,
alternated pass by pass, each in its own transaction as the lease keeper does, and prints the
quartiles and mean of milliseconds per pass of each and the ratios new/old (ADR 0014: an
unfollowed run costs nothing more).
"""

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # `python bench/renew_cost.py`

from bench.daemon_throughput import database
from scheduler_daemon.domain import timing
from scheduler_daemon.storage import query

ROOT = Path(__file__).resolve().parent.parent


def _seed(url: str, runs: int) -> tuple[list[int], list[int], list[int]]:
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO task (name, schedule_kind, every, anchor_at, executor, payload, "
            "overlap, next_run_at) VALUES ('renew', 'interval', '1 hour', now(), 'shell', "
            "'{\"command\": \"true\"}', 'allow', now() + interval '1 hour')"
        )
        conn.execute(
            "INSERT INTO occurrence (task_id, occurrence_seq, scheduled_for, trigger, overlap, "
            "status, not_before, lease_token, claim_owner) SELECT t.id, g, now(), 'manual', "
            "'allow', 'running', now(), 1, 'bench' FROM task t, generate_series(1, %s) g",
            (runs,),
        )
        rows = conn.execute(
            "INSERT INTO run (occurrence_id, attempt, owner, lease_token, lease_expires_at, "
            "takeover_at, status, build_revision) SELECT id, 1, 'bench', 1, now() + '1 h', "
            "now() + '1 h', 'running', '0023' FROM occurrence ORDER BY id "
            "RETURNING id, occurrence_id, lease_token"
        ).fetchall()
    return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("old_sql", type=Path)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--passes", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    old = {q.name: q for q in query.parse(args.old_sql.read_text(), "old")}["run_renew"]
    new = {q.name: q for q in query.parse((ROOT / "sql" / "run.sql").read_text(), "new")}[
        "run_renew"
    ]
    url = database("bench_renew_cost")
    ids, occurrence_ids, tokens = _seed(url, args.runs)
    ttl = timedelta(seconds=30)
    params = {
        "ids": ids,
        "occurrence_ids": occurrence_ids,
        "tokens": tokens,
        "owner": "bench",
        "ttl": ttl,
        "grace": timedelta(seconds=10),
        "follow_window": timing.follow_window(ttl),
    }
    times: dict[str, list[float]] = {"old": [], "new": []}
    with psycopg.connect(url, autocommit=True, row_factory=dict_row, prepare_threshold=None) as c:
        for i in range(args.passes * args.rounds):
            order = (("old", old), ("new", new)) if i % 2 else (("new", new), ("old", old))
            for label, statement in order:  # alternated pass by pass: same host conditions
                started = time.perf_counter()
                with c.transaction():
                    c.execute(statement.sql, params).fetchall()
                times[label].append((time.perf_counter() - started) * 1000)
    print(f"runs {args.runs}, {args.passes * args.rounds} passes each, alternated")
    for q in (0.25, 0.5, 0.75):
        o = statistics.quantiles(times["old"], n=100)[int(q * 100) - 1]
        n = statistics.quantiles(times["new"], n=100)[int(q * 100) - 1]
        print(f"p{int(q * 100)}: old {o:.4f} ms, new {n:.4f} ms, new/old {n / o:.3f}")
    o, n = statistics.fmean(times["old"]), statistics.fmean(times["new"])
    print(f"mean: old {o:.4f} ms, new {n:.4f} ms, new/old {n / o:.3f}")


if __name__ == "__main__":
    main()
