"""logconfig.enabled: the hot path's per-run events ask it before building an event, so it must
follow whatever structlog is configured with at the time, reset included (tests capture the
events after a CLI run configured a higher level and reset it). And the standard library's
records (psycopg's pool) go through structlog: one JSON line each, secrets masked."""

import json
import logging
import socket
import time
from collections.abc import Iterator

import pytest
import structlog

from scheduler_daemon import logconfig


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    structlog.reset_defaults()
    logconfig.unroute_stdlib()


def test_every_level_passes_until_a_level_is_configured() -> None:
    assert logconfig.enabled(logging.DEBUG)
    assert logconfig.enabled(logging.INFO)


def test_a_configured_level_filters_the_levels_below_it() -> None:
    logconfig.configure("warning", "json")

    assert not logconfig.enabled(logging.INFO)
    assert logconfig.enabled(logging.WARNING)
    assert logconfig.enabled(logging.ERROR)


def test_a_reset_lets_every_level_pass_again() -> None:
    logconfig.configure("error", "json")

    structlog.reset_defaults()

    assert logconfig.enabled(logging.INFO)


def _json_lines(text: str) -> list[dict[str, object]]:
    """Every line of `text` parsed as JSON (a line that is not fails the test)."""
    return [json.loads(line) for line in text.splitlines()]


def _refuse(message: str) -> None:
    raise OSError(message)


def test_a_stdlib_record_is_one_json_line_with_its_secrets_masked(capsys) -> None:
    # On eddeb28 logging.basicConfig's handler printed `WARNING:psycopg.pool:...` as plain text,
    # one line per line of the message and of the traceback, unmasked, inside the JSON stream
    # (under pytest, whose handler came first, nothing reached stderr: no line to parse).
    logconfig.remember_secrets(frozenset({"pool-pw-123"}))
    logconfig.configure("info", "json")
    try:
        _refuse("connection refused\n\tIs the server running? pool-pw-123 was sent")
    except OSError:
        logging.getLogger("psycopg.pool").warning(
            "error connecting in %r: refused\n\tsecond line", "pool-1", exc_info=True
        )
    logging.getLogger("psycopg").info("below warning: not shown")

    err = capsys.readouterr().err
    (event,) = _json_lines(err)
    assert event["event"] == "error connecting in 'pool-1': refused\n\tsecond line"
    assert (event["level"], event["logger"]) == ("warning", "psycopg.pool")
    assert "OSError" in str(event["exception"])
    assert "pool-pw-123" not in err


def test_a_pool_that_cannot_connect_warns_in_one_json_line_per_warning(capsys) -> None:
    from scheduler_daemon.storage.database import make_pool

    with socket.socket() as closed:  # bound, not listening: every connect is refused
        closed.bind(("127.0.0.1", 0))
        url = f"postgresql://u:pool-pw-456@127.0.0.1:{closed.getsockname()[1]}/db"
        logconfig.remember_secrets(frozenset({"pool-pw-456"}))
        logconfig.configure("info", "json")
        pool = make_pool(url, max_size=1, name="closed")
        pool.open(wait=False)
        try:
            err, deadline = "", time.monotonic() + 10
            while "error connecting" not in err and time.monotonic() < deadline:
                time.sleep(0.05)
                err += capsys.readouterr().err
        finally:
            pool.close()
    err += capsys.readouterr().err

    events = _json_lines(err)
    warnings = [e for e in events if "error connecting in 'closed'" in str(e["event"])]
    assert warnings, err
    assert all(e["logger"] == "psycopg.pool" for e in warnings)
    assert "pool-pw-456" not in err
