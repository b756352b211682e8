"""What the services tell a tracer about a run (`RunTracer`, `RunTrace`): the interface only, so
the services never import OpenTelemetry; runtime/tracing.py implements it when --otel is on."""

from collections.abc import Mapping
from typing import Protocol

Attributes = Mapping[str, str | int]


class RunTrace(Protocol):
    """One run's span, from its job's start to its recorded outcome. Never raises."""

    traceparent: str  # W3C trace context of the span, handed to the job

    def event(self, name: str, attributes: Attributes | None = None) -> None:
        """A moment in the run's life (`fenced`)."""
        ...

    def end(self, outcome: str, error: str | None = None) -> None:
        """The outcome was recorded (or the run was lost: `fenced`); a second call is ignored."""
        ...


class RunTracer(Protocol):
    """Starts a run's span and records what happens to runs this process does not hold. Every
    method returns at once (export happens on a thread of its own) and never raises."""

    def run_started(self, attributes: Attributes, claimed_at_ns: int) -> RunTrace | None:
        """A job is about to start: its span, with a `claim` event at `claimed_at_ns` (wall
        clock, nanoseconds); None when no span could be made."""
        ...

    def takeover(self, attributes: Attributes) -> None:
        """This process took over a run whose owner stopped renewing (a short span)."""
        ...

    def close(self) -> None:
        """Export what is left, waiting a bounded time."""
        ...
