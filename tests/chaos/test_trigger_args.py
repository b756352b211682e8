"""`tasks trigger --arg/--args-json` with a real daemon (issue 38 item 3): the arguments reach
the job of each executor kind (SCHEDULER_ARGS for a shell job, ctx.args for a python job in a
worker and in-process, `args` in the http body beside the ids), and a retry gets them again;
`runs show --occurrence` and `runs list --json` show them."""

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support import PostServer, query, wait_for

pytestmark = pytest.mark.slow
RETRIED = ("--max-attempts", "2", "--backoff", "1ms")


class FailingReceiver(PostServer):
    """Records every POST's JSON body and answers 500, so each attempt is retried."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        super().__init__(lambda body, _headers: self.bodies.append(json.loads(body)) or 500)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_arguments_reach_every_executor_and_every_retry(spawn, cli, database_url, tmp_path) -> None:
    receiver = FailingReceiver()
    try:
        files = {kind: tmp_path / f"{kind}.jsonl" for kind in ("shell", "python", "inproc")}
        record = 'echo "{\\"attempt\\": $SCHEDULER_ATTEMPT, \\"args\\": $SCHEDULER_ARGS}"'
        shell = f"{record} >> {files['shell']}; exit 1"
        definitions = {
            "shell": ("--command", shell),
            "python": ("--call", "tests.jobs:record_args"),
            "inproc": ("--call", "tests.jobs:record_args", "--in-process"),
            "http": ("--http", f"http://127.0.0.1:{receiver.server_address[1]}/hook"),
        }
        for name, what in definitions.items():
            added = cli("tasks", "add", name, "--every", "1h", *what, *RETRIED)
            assert added.code == 0, added.err
        spawn(database_url, "args").instance_id()
        occurrences = {}
        for name in definitions:
            given = {"file": str(files.get(name, "")), "who": name, "n": 3, "nested": {"é": [1]}}
            if name == "shell":  # --arg: each value a string
                done = cli(
                    "tasks",
                    "trigger",
                    name,
                    "--arg",
                    f"file={given['file']}",
                    "--arg",
                    f"who={name}",
                    "--json",
                )
                given = {"file": given["file"], "who": name}
            else:
                done = cli("tasks", "trigger", name, "--args-json", json.dumps(given), "--json")
            assert done.code == 0, done.err
            assert done.json()["args"] == given
            occurrences[name] = (done.json()["id"], given)

        def finished() -> bool:
            rows = query(database_url, "SELECT status FROM occurrence")
            return len(rows) == 4 and all(r["status"] == "failed" for r in rows)

        wait_for(finished, timeout=60, message="every occurrence to fail twice")
        for name, (occurrence_id, given) in occurrences.items():
            if name == "http":
                seen = [b for b in receiver.bodies if b["occurrence_id"] == occurrence_id]
            else:
                seen = _lines(files[name])
            # Both attempts got the same arguments (the retry gets them again).
            assert sorted(s["attempt"] for s in seen) == [1, 2], (name, seen)
            assert [s["args"] for s in seen] == [given, given], (name, seen)
            shown = cli("runs", "show", "--occurrence", str(occurrence_id), "--json").json()
            assert shown["args"] == given
            assert [r["args"] for r in shown["runs"]] == [given, given]
        listed = cli("runs", "list", "--json").json()
        assert {r["occurrence_id"]: r["args"] for r in listed} == dict(occurrences.values())
    finally:
        receiver.shutdown()
        receiver.server_close()
