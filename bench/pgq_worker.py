"""One PgQueuer worker process for bench/run.py, running bench.noop's handler (PgQueuer's own API:
a QueueManager over a psycopg async connection, its default batch size unless told, and no cap
on the jobs in flight unless told: its `max_concurrent_tasks`, at least twice the batch)."""

import asyncio
import signal
import sys

import psycopg
from pgqueuer import Queries, QueueManager
from pgqueuer.db import PsycopgDriver

from bench import noop


async def serve(url: str, batch_size: int, cap: int | None) -> None:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(conn)))
    qm.entrypoint("noop")(noop.record_pgqueuer)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    await qm.run(batch_size=batch_size, max_concurrent_tasks=cap)
    await conn.close()


def main(args: list[str]) -> None:
    url, batch_size = args[0], int(args[1]) if len(args) > 1 else 10
    cap = int(args[2]) if len(args) > 2 else None
    asyncio.run(serve(url, batch_size, cap))
    sys.exit(0)


if __name__ == "__main__":  # python -m bench.pgq_worker URL [BATCH [CAP]]
    main(sys.argv[1:])
