"""Configures structlog: JSON lines off a terminal, console output on one, secrets redacted:
database passwords and secret HTTP headers (domain.secret), in every string of an event, in
nested mappings, and in rendered tracebacks."""

import functools
import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog

from scheduler_daemon.domain.secret import (
    MASK,
    SECRET_HEADERS,
    is_secret_header,
    mask_values,
    redact,
)

LEVELS = ("debug", "info", "warning", "error")
_remembered: set[str] = set()  # the configured database password in each form (remember_secrets)


def remember_secrets(values: frozenset[str]) -> None:
    """Masks each of `values` (the configured URL's password, raw and percent-decoded) wherever
    it appears in a log line or an error (`scrub_text`) from now on, whatever the text around
    it: a password libpq echoed in its own message is masked too."""
    _remembered.update(values)


def scrub_text(text: str) -> str:
    """`text` with secrets masked: the remembered ones, then every pattern domain.secret
    knows."""
    return redact(mask_values(text, _remembered) if _remembered else text)


def enabled(level: int) -> bool:
    """Whether an event at `level` (logging.INFO, ...) passes the filter structlog is configured
    with now (configure's level, or structlog's defaults: everything). A per-run event asks
    first: a filtered event still cost its logger's assembly on the proxy that
    `structlog.get_logger()` returns (about 20 us, two a job at full load)."""
    wrapper = structlog.get_config()["wrapper_class"]
    check = getattr(wrapper, "is_enabled_for", None)  # filtering loggers have it
    return True if check is None else bool(check(None, level))


def _scrub(value: Any) -> Any:
    """`value` with secrets masked: strings redacted, mappings and sequences walked, and the
    value of a key that names a secret header (`headers={"Authorization": ...}`) masked."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {
            k: MASK if isinstance(k, str) and _secret_key(k) else _scrub(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return type(value)(_scrub(v) for v in value)
    return value


@functools.lru_cache(maxsize=4096)  # log field names are few; a header map's keys are bounded
def _secret_key(key: str) -> bool:
    """A secret header's name. Log fields are snake_case: one with an underscore is a secret
    only when it spells a known header (`x_api_key`), so `lease_token` is not one."""
    if "_" in key:
        return key.lower().replace("_", "-") in SECRET_HEADERS
    return is_secret_header(key)


def _redact(_: Any, __: str, event: MutableMapping[str, Any]) -> dict[str, Any]:
    return {k: MASK if _secret_key(k) else _scrub(v) for k, v in event.items()}


class _Stderr:
    """Whatever sys.stderr is at the time of writing (it may be replaced after configuration)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


_STDLIB_HANDLER = "scheduler-daemon"
"""The name of the root logger's handler `configure` installs (and replaces on a second call)."""


def configure(level: str = "info", fmt: str = "auto") -> None:
    """Logs go to stderr, so command output on stdout stays clean for --json. Records of the
    standard library's `logging` (psycopg's pool warnings) go through the same processors: one
    JSON line each, secrets masked, at warning and above (or `level`, if higher)."""
    stream = sys.stderr
    use_json = fmt == "json" or (fmt == "auto" and not stream.isatty())
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if use_json
        else structlog.dev.ConsoleRenderer(colors=stream.isatty())
    )
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.format_exc_info,  # before _redact: tracebacks are text too
        _redact,
        structlog.processors.TimeStamper(fmt="iso", utc=True),  # ours: nothing to redact
    ]
    threshold = getattr(logging, level.upper())
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.PrintLoggerFactory(_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    _route_stdlib(max(threshold, logging.WARNING), shared, renderer)


def _route_stdlib(level: int, shared: list[Any], renderer: Any) -> None:
    """The root logger's handler: each record from `level` on rendered by structlog's
    `renderer` after the `shared` processors (a multi-line message, a traceback: one JSON
    line), with its logger's name; replaces the one an earlier call installed."""
    handler = logging.StreamHandler(_Stderr())
    handler.set_name(_STDLIB_HANDLER)
    handler.setLevel(level)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    unroute_stdlib()
    logging.getLogger().addHandler(handler)  # the root logger stays at its WARNING


def unroute_stdlib() -> None:
    """Removes the root logger's handler `configure` installed (a test's teardown)."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _STDLIB_HANDLER]:
        root.removeHandler(old)
