"""OpenTelemetry (issue 35 item 2, ADR 0017) through a real `scheduler-daemon run` process: with
--otel its run spans reach a local OTLP/HTTP receiver, which decodes them with opentelemetry-proto,
carrying the run's identifiers and outcome; the shell, python (worker and in-process) and http jobs
see the span's own trace context; off, nothing is sent and no job gets one; a dead endpoint costs
no job; --otel without the extra is one line, exit 2, nothing written; a run taken over ends
`fenced` on its owner's span and is a `scheduler.takeover` span on the peer's.
Before this change every test here fails: there is no --otel and no TRACEPARENT."""

import contextlib
import json
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2  # the `dev` extra has it

from scheduler_daemon.domain.held import HeldRuns
from scheduler_daemon.domain.task import TaskSpec
from scheduler_daemon.runtime.root import build_services
from scheduler_daemon.runtime.tracing import OtelTracer
from tests.support import SETTINGS, free_port, query, shell_task, wait_for

pytestmark = pytest.mark.slow


class Recorder:
    """What a local HTTP server was sent: the bodies of POSTs, and their headers."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[tuple[str, dict[str, str], bytes]] = []

    def add(self, path: str, headers: dict[str, str], body: bytes) -> None:
        with self.lock:
            self.requests.append((path, headers, body))

    def all(self) -> list[tuple[str, dict[str, str], bytes]]:
        with self.lock:
            return list(self.requests)

    def spans(self) -> list[Any]:
        """Every span of every OTLP/HTTP export received, decoded."""
        found = []
        for path, _, body in self.all():
            assert path == "/v1/traces"
            request = trace_service_pb2.ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    found += list(scope.spans)
        return found


@contextlib.contextmanager
def serving(recorder: Recorder, content_type: str) -> Iterator[int]:
    """A local HTTP server recording every POST, answering 200 with an empty body."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            recorder.add(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


@dataclass(frozen=True)
class Rig:
    """The OTLP/HTTP test receiver (no collector is packaged here), the http jobs' endpoint
    recording their headers, and the file the shell job writes its $TRACEPARENT to."""

    spans: Recorder
    port: int
    hooked: Recorder
    hook_port: int
    written: Path


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    monkeypatch.delenv("TRACEPARENT", raising=False)  # the daemons inherit this environment
    spans, hooked = Recorder(), Recorder()
    with (
        serving(spans, "application/x-protobuf") as port,
        serving(hooked, "text/plain") as hook_port,
    ):
        # An in-process OtelTracer's exporter reads it; a daemon's tracing stays off without it.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
        yield Rig(spans, port, hooked, hook_port, tmp_path / "traceparent")


def _every_kind(client: Any, rig: Rig) -> dict[str, int]:
    """A shell task writing its $TRACEPARENT to `written`, a python one in a worker, one in
    process and an http one, each triggered once; their task ids by name."""
    hourly = timedelta(hours=1)
    specs = [
        TaskSpec(
            name="shell",
            executor="shell",
            target=f'printf %s "${{TRACEPARENT-unset}}" > {rig.written}',
            every=hourly,
        ),
        TaskSpec(name="python", executor="python", target="tests.jobs:trace_context", every=hourly),
        TaskSpec(
            name="inproc",
            executor="python",
            target="tests.jobs:trace_context",
            every=hourly,
            in_process=True,
        ),
        TaskSpec(
            name="http",
            executor="http",
            target=f"http://127.0.0.1:{rig.hook_port}/hook",
            every=hourly,
        ),
    ]
    ids = {spec.name: client.add_task(spec).id for spec in specs}
    for task_id in ids.values():
        client.trigger(task_id, requested_by="test")
    return ids


def _runs(url: str, count: int) -> dict[str, dict[str, Any]]:
    """The runs by task name once `count` of them succeeded."""
    rows = wait_for(
        lambda: (
            found
            if len(
                found := query(
                    url,
                    "SELECT t.name, r.id, r.uuid::text AS run_uuid, r.attempt, r.lease_token,"
                    " r.status, r.output_tail, o.id AS occurrence_id,"
                    " coalesce(o.idempotency_key, 'scheduler-daemon-occurrence-' || o.id)"
                    " AS idempotency_key"
                    " FROM run r JOIN occurrence o ON o.id = r.occurrence_id"
                    " JOIN task t ON t.id = o.task_id WHERE r.status = 'success'",
                )
            )
            == count
            else None
        ),
        message=f"{count} successful runs",
    )
    return {row["name"]: row for row in rows}


def _attributes(span: Any) -> dict[str, Any]:
    values = {}
    for kv in span.attributes:
        kind = kv.value.WhichOneof("value")
        values[kv.key] = getattr(kv.value, kind)
    return values


def _env(port: int | None) -> dict[str, str]:
    env = {"OTEL_BSP_SCHEDULE_DELAY": "100"}  # export within 0.1 s of a span's end
    if port is not None:
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = f"http://127.0.0.1:{port}"
    return env


def test_with_otel_each_run_is_a_span_and_every_job_sees_its_trace_context(
    client, database_url, spawn, rig
) -> None:
    ids = _every_kind(client, rig)
    daemon = spawn(database_url, "traced", "--otel", env=_env(rig.port))
    runs = _runs(database_url, 4)
    assert daemon.stop() == 0  # the last spans are flushed on the way out
    instance = query(database_url, "SELECT DISTINCT owner FROM run")
    spans = {
        _attributes(s)["scheduler.run.id"]: s
        for s in rig.spans.spans()
        if s.name == "scheduler.run"
    }
    assert sorted(spans) == sorted(run["id"] for run in runs.values())

    seen = {
        "shell": rig.written.read_text(),
        "python": json.loads(runs["python"]["output_tail"])["env"],
        "inproc": json.loads(runs["inproc"]["output_tail"])["ctx"],
        "http": rig.hooked.all()[0][1]["traceparent"],
    }
    # A python worker job finds it in its environment and on ctx alike.
    assert json.loads(runs["python"]["output_tail"])["ctx"] == seen["python"]
    for name, run in runs.items():
        span = spans[run["id"]]
        assert _attributes(span) == {
            "scheduler.task.name": name,
            "scheduler.task.id": ids[name],
            "scheduler.occurrence.id": run["occurrence_id"],
            "scheduler.run.id": run["id"],
            "scheduler.run.uuid": run["run_uuid"],
            "scheduler.attempt": run["attempt"],
            "scheduler.lease_token": run["lease_token"],
            "scheduler.idempotency_key": run["idempotency_key"],
            "scheduler.executor": "inprocess" if name == "inproc" else name,
            "scheduler.instance_id": instance[0]["owner"],
            "scheduler.outcome": "success",
        }, name
        assert [event.name for event in span.events] == ["claim"]
        assert span.events[0].time_unix_nano <= span.start_time_unix_nano
        version, trace_id, span_id, flags = seen[name].split("-")
        assert version == "00", name
        assert int(flags, 16) & 1, name  # sampled (0x02, W3C level 2's `random`, may be set)
        assert (trace_id, span_id) == (span.trace_id.hex(), span.span_id.hex()), name


def test_without_otel_nothing_is_sent_and_no_job_gets_a_trace_context(
    client, database_url, spawn, rig
) -> None:
    _every_kind(client, rig)
    # The endpoint variable alone (meant for the jobs, say) does not turn tracing on.
    daemon = spawn(database_url, "plain", env=_env(rig.port))
    runs = _runs(database_url, 4)
    assert daemon.stop() == 0
    assert rig.written.read_text() == "unset"
    assert json.loads(runs["python"]["output_tail"]) == {"env": None, "ctx": None}
    assert json.loads(runs["inproc"]["output_tail"]) == {"env": None, "ctx": None}
    assert "traceparent" not in rig.hooked.all()[0][1]
    assert rig.spans.all() == []


def test_a_dead_endpoint_costs_spans_never_a_job_nor_the_daemon(
    client, database_url, spawn, rig
) -> None:
    _every_kind(client, rig)
    daemon = spawn(database_url, "unheard", "--otel", env=_env(free_port()))
    _runs(database_url, 4)
    assert daemon.stop() == 0  # its exit waits at most tracing.CLOSE_WAIT_SECONDS for them


def test_otel_without_the_extra_is_one_line_exit_2_and_writes_nothing(
    cli, counts, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.sdk.trace", None)  # import fails
    before = counts()
    result = cli("run", "--otel")
    assert result.code == 2
    assert result.err.count("\n") == 1
    assert "OpenTelemetry is not installed" in result.err
    assert "scheduler-daemon[otel]" in result.err
    assert counts() == before


def test_a_run_taken_over_is_fenced_on_its_owners_span_and_a_takeover_span_on_the_peers(
    client, pool, executors, database_url, rig
) -> None:
    tracers = {name: OtelTracer(name) for name in ("owner", "peer")}
    owner, peer = (
        build_services(
            pool,
            database_url,
            instance_id=name,
            settings=SETTINGS,
            held=HeldRuns(),
            executors=executors,
            tracer=tracers[name],
        )
        for name in ("owner", "peer")
    )
    task = shell_task(client, "victim", "sleep 30")
    client.trigger(task.id, requested_by="test")
    assert owner.launcher.run_once().launched == 1
    (held,) = list(owner.launcher.held)
    # What a dead owner leaves behind: a lease whose takeover point has passed.
    query(
        database_url,
        "UPDATE run SET lease_expires_at = now() - interval '10 seconds', "
        "takeover_at = now() - interval '5 seconds' WHERE status = 'running' RETURNING id",
    )
    assert peer.reconciler.run_once().ids["taken_over"] == [held.run_id]
    assert owner.keeper.run_once() == {held.run_id}  # the owner learns it and stops the job
    wait_for(held.job.poll, timeout=5)
    assert owner.completer.run_once().done == 1
    for tracer in tracers.values():
        tracer.close()

    spans = wait_for(lambda: len(found := rig.spans.spans()) == 2 and found, message="2 spans")
    by_name = {span.name: span for span in spans}
    run = by_name["scheduler.run"]
    assert _attributes(run)["scheduler.outcome"] == "fenced"
    assert _attributes(run)["scheduler.instance_id"] == "owner"
    assert [event.name for event in run.events] == ["claim", "fenced"]
    assert _attributes(run.events[1]) == {"stage": "renewal"}
    assert run.status.code == run.status.STATUS_CODE_ERROR
    takeover = by_name["scheduler.takeover"]
    assert _attributes(takeover) == {
        "scheduler.run.id": held.run_id,
        "scheduler.occurrence.id": held.occurrence_id,
        "scheduler.task.id": task.id,
        "scheduler.lease_token": held.token,
        "scheduler.previous_owner": "owner",
        "scheduler.instance_id": "peer",
    }
    assert [event.name for event in takeover.events] == ["takeover"]
