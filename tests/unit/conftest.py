"""Fixtures for the unit tests (no database)."""

import threading

import pytest


@pytest.fixture
def wake() -> threading.Event:
    """The event executors set when a job finishes."""
    return threading.Event()
