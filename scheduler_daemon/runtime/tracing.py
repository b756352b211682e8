"""OpenTelemetry behind `--otel` (the `otel` extra, ADR 0017): a span per run exported over
OTLP/HTTP by a batch processor on a thread of its own, configured by the standard OTEL_*
variables; the one module that imports opentelemetry."""

import threading
from typing import Any

import structlog

from scheduler_daemon.domain.trace import Attributes, RunTrace, RunTracer

log = structlog.get_logger()
EXTRA_MISSING = (
    "--otel (SCHEDULER_OTEL): OpenTelemetry is not installed; install the extra "
    "(pip install 'scheduler-daemon[otel]') or turn tracing off"
)
CLOSE_WAIT_SECONDS = 2.0  # at exit, how long the last spans may take to leave


def available() -> bool:
    """Whether the `otel` extra's packages can be imported."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter
        import opentelemetry.sdk.trace  # noqa: F401
    except ImportError:
        return False
    return True


class OtelRunTrace:
    """One run's span; every call is guarded, so a tracing failure never reaches a service."""

    __slots__ = ("_ended", "_span", "traceparent")

    def __init__(self, span: Any) -> None:
        self._span = span
        self._ended = False
        context = span.get_span_context()
        self.traceparent = (
            f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
        )

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        try:
            self._span.add_event(name, dict(attributes or {}))
        except Exception as exc:  # tracing must never fail a run
            _failed("event", exc)

    def end(self, outcome: str, error: str | None = None) -> None:
        if self._ended:
            return
        self._ended = True
        try:
            from opentelemetry.trace import Status, StatusCode

            self._span.set_attribute("scheduler.outcome", outcome)
            if outcome == "success":
                self._span.set_status(Status(StatusCode.OK))
            else:
                self._span.set_status(Status(StatusCode.ERROR, error or outcome))
            self._span.end()
        except Exception as exc:
            _failed("end", exc)


class OtelTracer:
    """The daemon's tracer provider: resource `service.name` scheduler-daemon (unless
    OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names one) and `service.instance.id`, an
    OTLP/HTTP exporter reading OTEL_EXPORTER_OTLP_* itself, and a BatchSpanProcessor: a span
    ends into a bounded queue, so a dead endpoint drops spans (the SDK logs it) and never stalls
    a claim or a job."""

    def __init__(self, instance_id: str) -> None:
        import os

        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        given = os.environ.get("OTEL_SERVICE_NAME") or "service.name=" in os.environ.get(
            "OTEL_RESOURCE_ATTRIBUTES", ""
        )
        attributes = {"service.instance.id": instance_id}
        if not given:
            attributes["service.name"] = "scheduler-daemon"
        self._provider = TracerProvider(resource=Resource.create(attributes))
        self._provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        self._tracer = self._provider.get_tracer("scheduler_daemon")
        self.instance_id = instance_id

    def run_started(self, attributes: Attributes, claimed_at_ns: int) -> RunTrace | None:
        try:
            span = self._tracer.start_span("scheduler.run", attributes=dict(attributes))
            if not span.get_span_context().is_valid:  # OTEL_SDK_DISABLED=true: no span
                return None
            span.add_event("claim", {"scheduler.instance_id": self.instance_id}, claimed_at_ns)
            return OtelRunTrace(span)
        except Exception as exc:
            _failed("run_started", exc)
            return None

    def takeover(self, attributes: Attributes) -> None:
        try:
            span = self._tracer.start_span("scheduler.takeover", attributes=dict(attributes))
            span.add_event("takeover", {"scheduler.instance_id": self.instance_id})
            span.end()
        except Exception as exc:
            _failed("takeover", exc)

    def close(self) -> None:
        """Flushes and shuts the exporter down on a thread, waiting at most CLOSE_WAIT_SECONDS:
        a dead endpoint must not hold the daemon's exit."""
        closer = threading.Thread(target=self._provider.shutdown, name="otel-shutdown", daemon=True)
        closer.start()
        closer.join(CLOSE_WAIT_SECONDS)
        if closer.is_alive():
            log.warning("tracing_close_timed_out", wait_seconds=CLOSE_WAIT_SECONDS)


def open_tracer(enabled: bool, instance_id: str) -> RunTracer | None:
    """The daemon's tracer with --otel on, else None (nothing imported, nothing spent). The
    extra's absence was refused at start (`run`); one that fails to build here is logged and
    leaves tracing off rather than the daemon down."""
    if not enabled:
        return None
    try:
        tracer = OtelTracer(instance_id)
    except Exception as exc:
        log.warning("tracing_unavailable", error=f"{type(exc).__name__}: {exc}")
        return None
    log.info("tracing_on", instance_id=instance_id)
    return tracer


_warned: set[str] = set()


def _failed(where: str, exc: Exception) -> None:
    """A tracing call failed: one warning per place, then silence (never the run's problem)."""
    if where not in _warned:
        _warned.add(where)
        log.warning("tracing_failed", where=where, error=f"{type(exc).__name__}: {exc}")
