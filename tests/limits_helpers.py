"""What the limits' tests share: a fresh limits cache and throttle around each test,
and an enqueue of one customer's jobs (docs/limits.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_jobqueue import enqueue_job
from django_jobqueue.storage_limits import clear_throttled
from django_jobqueue.store import limits


@pytest.fixture(autouse=True)
def _fresh_limits() -> Iterator[None]:
    """The process's limits cache and throttled keys empty before and after a test
    (autouse in every module that imports it)."""
    limits.clear_cache()
    clear_throttled()
    yield
    limits.clear_cache()
    clear_throttled()


def enqueue(customer: str, count: int, job_type: str = "limits.run", **options: Any) -> list[str]:
    """Enqueue ``count`` jobs of ``job_type`` on queue ``lim`` for ``customer``
    (payload ``{"customer": customer, "n": i}``); return their jids."""
    return [
        enqueue_job("lim", job_type, {"customer": customer, "n": i}, **options)["jid"]
        for i in range(count)
    ]
