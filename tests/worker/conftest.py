"""Fixtures of the worker tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.test import override_settings

#: Retries due at once (no backoff), so a burst drain runs every attempt.
NO_BACKOFF = {"BACKOFF_BASE_MS": 0, "BACKOFF_JITTER": 0}


@pytest.fixture
def no_backoff() -> Iterator[None]:
    """Make retries due at once (JOBQUEUE backoff of 0 ms)."""
    with override_settings(JOBQUEUE=NO_BACKOFF):
        yield
