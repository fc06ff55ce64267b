"""Fixtures of the worker tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.backends.signals import connection_created
from django.test import override_settings

#: Retries due at once (no backoff), so a burst drain runs every attempt.
NO_BACKOFF = {"BACKOFF_BASE_MS": 0, "BACKOFF_JITTER": 0}


@pytest.fixture
def no_backoff() -> Iterator[None]:
    """Make retries due at once (JOBQUEUE backoff of 0 ms)."""
    with override_settings(JOBQUEUE=NO_BACKOFF):
        yield


#: Seconds of idleness after which the server closes a worker session.
IDLE_S = 1


@pytest.fixture
def idle_timeout() -> Iterator[None]:
    """Make the server close every new session of another thread than the test's
    after :data:`IDLE_S` idle seconds."""
    test_thread = threading.get_ident()

    def short_idle(sender: Any, connection: Any, **kwargs: Any) -> None:
        if threading.get_ident() == test_thread:
            return
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute(f"SET idle_session_timeout = {IDLE_S * 1000}")
            else:
                cursor.execute(f"SET SESSION wait_timeout = {IDLE_S}")

    connection_created.connect(short_idle, dispatch_uid="tests.worker.idle_timeout")
    try:
        yield
    finally:
        connection_created.disconnect(dispatch_uid="tests.worker.idle_timeout")
