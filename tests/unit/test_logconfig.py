"""logconfig.enabled: the hot path's per-run events ask it before building an event, so it must
follow whatever structlog is configured with at the time, reset included (tests capture the
events after a CLI run configured a higher level and reset it)."""

import logging
from collections.abc import Iterator

import pytest
import structlog

from scheduler_daemon import logconfig


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    structlog.reset_defaults()


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
