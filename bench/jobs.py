"""Benchmark job types: autodiscovered as the ``bench`` app's ``jobs`` module."""

from __future__ import annotations

import time
from typing import Any

from django_jobqueue import job


@job("bench.noop", max_retry=0)
def noop(payload: Any, ctx: Any) -> None:
    """Do nothing: the drain measures the queue, not the handler."""


@job("bench.stamp", max_retry=0)
def stamp(payload: Any, ctx: Any) -> float:
    """Return the time the handler started (``time.time()``), for pickup latency."""
    return time.time()


@job("bench.batch_done", max_retry=3)
def batch_done(payload: Any, ctx: Any) -> dict[str, Any]:
    """A batch's ``on_finish`` callback (bench/workflows.py): return the counts it got."""
    return dict(payload["counts"])


@job("bench.anoop", max_retry=0)
async def anoop(payload: Any, ctx: Any) -> None:
    """Do nothing, ``async def``: runs on the foreman's event loop (bench/async_drain.py)."""
