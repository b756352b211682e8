"""What the manifests and docs rely on, asked of a real daemon: the probe paths answer as the
Kubernetes base expects, and /metrics exports exactly the metrics docs/operations.md describes
(so the alert rules, checked against that table, use real names), and docs/cli.md's metrics table
when it has one."""

import re
import socket
import urllib.error
import urllib.request

import pytest

from tests.deploy.test_docs import METRIC, ROOT, _section, _table, documented_metrics
from tests.support import wait_for

pytestmark = pytest.mark.slow
TYPE_LINE = re.compile(r"^# TYPE (scheduler_daemon_[a-z_]+) (\w+)$", re.M)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> tuple[int, str] | None:
    """(status, body), or None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return None


def test_a_daemon_answers_the_probes_and_exports_the_documented_metrics(
    spawn, database_url
) -> None:
    port = _free_port()
    daemon = spawn(database_url, "http", "--http-port", str(port), "--http-host", "127.0.0.1")
    base = f"http://127.0.0.1:{port}"

    def answered(path: str, status: int) -> str | None:
        assert daemon.proc.poll() is None, daemon.log()
        got = _get(base + path)
        return got[1] if got is not None and got[0] == status else None

    wait_for(lambda: answered("/healthz", 200), message="/healthz to answer 200")
    daemon.instance_id()
    wait_for(lambda: answered("/readyz", 200), message="/readyz to answer 200")
    metrics = wait_for(lambda: answered("/metrics", 200), message="/metrics to answer")
    exported = dict(TYPE_LINE.findall(metrics))
    assert exported == documented_metrics()
    cli_md = ROOT / "docs" / "cli.md"
    if "\n### Metrics\n" in cli_md.read_text():  # the run command's own table
        rows = _table(_section(cli_md, "### Metrics"))
        assert {m for row in rows for m in METRIC.findall(row[0])} == set(exported)
    assert daemon.stop() == 0, daemon.log()
