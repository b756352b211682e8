"""One awa (`awa-pg`) worker process for bench/run.py, running bench.noop's handler.

awa's own API: an AsyncClient (a Rust runtime with its own pool, 10 connections by default), the
handler registered for the job kind `noop`, and `start()` with no queue list, which runs the
`default` queue at awa's default of 10 workers per queue and its 200 ms poll interval.

    python -m bench.awa_worker URL
"""

import asyncio
import signal
import sys
from dataclasses import dataclass

import awa

from bench import noop

KIND = "noop"


@dataclass
class Noop:
    """The (empty) arguments of the no-op job."""


async def serve(url: str) -> None:
    client = awa.AsyncClient(url)
    client.task(Noop, kind=KIND)(noop.record_awa)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await client.start()
    await stop.wait()
    await client.shutdown()
    await client.close()


def main(args: list[str]) -> None:
    asyncio.run(serve(args[0]))
    sys.exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
