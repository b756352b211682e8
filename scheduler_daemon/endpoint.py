"""The daemon's HTTP endpoint (--http-port): /healthz, /readyz and /metrics, served by the standard
library's threading HTTP server on a daemon thread of its own.

- `/healthz` (liveness): 200 `ok` while the loop makes progress, 503 with one line when it is
  stuck (`health.LoopProgress`). Never touches the database.
- `/readyz` (readiness): 200 `ready` when registered, not draining, and the database answers with
  this build's schema; 503 with one line naming the reason otherwise (`health.Readiness`).
- `/metrics`: the Prometheus text exposition of the daemon's registry (`metrics.Metrics`).
"""

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from scheduler_daemon.settings import InvalidSettings

log = structlog.get_logger()


class Endpoint:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        liveness: Callable[[], str | None],
        readiness: Callable[[], str | None],
        registry: CollectorRegistry,
    ) -> None:
        routes: dict[str, Callable[[], tuple[int, str, bytes]]] = {
            "/healthz": lambda: _probe(liveness(), "ok"),
            "/readyz": lambda: _probe(readiness(), "ready"),
            "/metrics": lambda: (200, CONTENT_TYPE_LATEST, generate_latest(registry)),
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # the name http.server dispatches to
                route = routes.get(self.path.split("?", 1)[0])
                code, kind, body = (
                    route() if route else (404, "text/plain", b"not found: try /healthz\n")
                )
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would drown the daemon's own events

        try:
            self.server = ThreadingHTTPServer((host, port), Handler)
        except OSError as exc:
            raise InvalidSettings(
                f"--http-host {host} --http-port {port}: cannot listen: {exc.strerror or exc}"
            ) from exc
        self.server.daemon_threads = True
        self._thread = threading.Thread(
            target=self.server.serve_forever, name="http-endpoint", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self.server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()
        host, port = self.address
        log.info("http_listening", host=host, port=port)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _probe(problem: str | None, fine: str) -> tuple[int, str, bytes]:
    if problem is None:
        return 200, "text/plain; charset=utf-8", f"{fine}\n".encode()
    return 503, "text/plain; charset=utf-8", f"{problem}\n".encode()
