"""One PgQueuer worker process for bench/run.py, running bench.noop's handler (PgQueuer's own API:
a QueueManager over a psycopg async connection, its default batch size unless told)."""

import asyncio
import signal
import sys

import psycopg
from pgqueuer import Queries, QueueManager
from pgqueuer.db import PsycopgDriver

from bench import noop


async def serve(url: str, batch_size: int) -> None:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    qm = QueueManager(Queries(PsycopgDriver(conn)))
    qm.entrypoint("noop")(noop.record_pgqueuer)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    await qm.run(batch_size=batch_size)
    await conn.close()


def main(args: list[str]) -> None:
    url, batch_size = args[0], int(args[1]) if len(args) > 1 else 10
    asyncio.run(serve(url, batch_size))
    sys.exit(0)
