"""Real daemons running jobs whose output PostgreSQL cannot store as given (a NUL byte, from a
shell, a python and an http job, and megabytes of output) record every run and stay up.

On 646db2b each such job failed its daemon's pass; after --max-failed-passes the daemon exited 3,
the next replica took the run over, ran it again and exited 3 too: one job took the fleet down."""

from collections.abc import Iterator

import pytest

from tests.support import answering, query, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def nul_receiver() -> Iterator[str]:
    with answering(b"a\x00b") as url:
        yield url


def test_jobs_printing_nul_bytes_and_megabytes_neither_crash_the_fleet_nor_lose_a_run(
    spawn, cli, database_url, nul_receiver
) -> None:
    tasks = {
        "nul-shell": ["--command", r"printf 'a\000b'"],
        "nul-stderr": ["--command", r"printf 'x\000y' >&2; exit 3"],
        "nul-python": ["--call", "tests.jobs:nul"],
        "nul-http": ["--http", nul_receiver],
        "big": ["--command", "head -c 3000000 /dev/zero; yes | head -c 200000"],
    }
    for name, target in tasks.items():
        assert cli("tasks", "add", name, "--every", "1s", *target).code == 0
    daemons = [spawn(database_url, f"d{i}", "--max-failed-passes", "2") for i in range(2)]

    def finished() -> dict[str, int]:
        rows = query(
            database_url,
            "SELECT t.name, count(*) AS n FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
            " JOIN task t ON t.id = o.task_id WHERE r.status IN ('success', 'failed')"
            " GROUP BY t.name",
        )
        return {row["name"]: row["n"] for row in rows}

    wait_for(
        lambda: len(finished()) == len(tasks) and min(finished().values()) >= 3,
        timeout=60,
        message="three recorded runs of every task",
    )
    for daemon in daemons:
        assert daemon.proc.poll() is None, daemon.log()
        assert '"pass_crashed"' not in daemon.log()
    (nul,) = query(
        database_url,
        "SELECT r.output_tail FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
        " JOIN task t ON t.id = o.task_id WHERE t.name = 'nul-shell' AND r.status = 'success'"
        " LIMIT 1",
    )
    assert nul["output_tail"] == "a\ufffdb"
    assert query(database_url, "SELECT count(*) AS n FROM run WHERE status = 'interrupted'") == [
        {"n": 0}
    ]
    for daemon in daemons:
        assert daemon.stop() == 0
    assert cli("audit").code == 0
