"""Job types of the worker tests (tests/worker/): each records its runs in RunRecord."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from typing import Any

from django_jobqueue import NonRetryableError, job


def record(ctx: Any, label: str = "") -> None:
    """Write one RunRecord row for this run of ``ctx``'s job."""
    from tests.testapp.models import RunRecord

    RunRecord.objects.create(jid=ctx.jid, label=label, attempt=ctx.attempt, worker=ctx.worker)


@job("worker.record", max_retry=3)
def record_run(payload: Any, ctx: Any) -> dict[str, Any]:
    """Record the run; return the payload's label."""
    label = str((payload or {}).get("label", ""))
    record(ctx, label)
    return {"label": label}


@job("worker.fail", max_retry=2)
def always_fail(payload: Any, ctx: Any) -> None:
    """Record the run, then fail (retryable)."""
    record(ctx, "fail")
    raise RuntimeError("boom")


@job("worker.fatal", max_retry=5)
def fatal(payload: Any, ctx: Any) -> None:
    """Record the run, then fail for good."""
    record(ctx, "fatal")
    raise NonRetryableError("bad input, do not retry")


@job("worker.sleep", max_retry=3)
def sleep(payload: Any, ctx: Any) -> None:
    """Record the run, then sleep ``payload["s"]`` seconds (with ``once``: only on the
    job's first run); stop early when cancelled or the lease is lost."""
    from tests.testapp.models import RunRecord

    record(ctx, str(payload.get("label", "sleep")))
    if payload.get("once") and RunRecord.objects.filter(jid=ctx.jid).count() > 1:
        return
    deadline = time.monotonic() + float(payload["s"])
    while time.monotonic() < deadline and not ctx.cancelled and not ctx.lease_lost:
        time.sleep(0.02)


@job("worker.async", max_retry=0)
async def async_run(payload: Any, ctx: Any) -> str:
    """An async handler: record the run from a thread, return a value."""
    await asyncio.sleep(0)
    from asgiref.sync import sync_to_async

    await sync_to_async(record)(ctx, "async")
    return "async-ok"


@job("worker.returns_awaitable", max_retry=0)
def returns_awaitable(payload: Any, ctx: Any) -> Any:
    """A plain ``def`` that returns a coroutine (as a wrapped ``async def`` may): the
    worker awaits it and stores what it returns."""

    async def value() -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"awaited": payload["n"]}

    return value()


_limited_lock = threading.Lock()
_limited_active = 0
#: Most worker.limited jobs seen running at once in this process.
limited_max = 0


@job("worker.limited", concurrent=1, max_retry=0)
def limited(payload: Any, ctx: Any) -> None:
    """Record the run and how many limited jobs overlap (concurrent=1)."""
    global _limited_active, limited_max
    with _limited_lock:
        _limited_active += 1
        limited_max = max(limited_max, _limited_active)
    try:
        record(ctx, "limited")
        time.sleep(float((payload or {}).get("s", 0.05)))
    finally:
        with _limited_lock:
            _limited_active -= 1


@job("worker.spawn", max_retry=0)
def spawn_child(payload: Any, ctx: Any) -> str:
    """Enqueue a worker.record child through the context; return its jid."""
    record(ctx, "parent")
    return ctx.enqueue_job(None, "worker.record", {"label": "child"})["jid"]


_computed_lock = threading.Lock()
#: Runs of worker.compute in this process, by jid (the handler touches no database).
computed: dict[str, int] = {}


@job("worker.compute", max_retry=3)
def compute(payload: Any, ctx: Any) -> dict[str, Any]:
    """Stand in for ``payload["s"]`` seconds of computing that never touches the
    database (it sleeps, so the shared test machine keeps its cores); count the run
    in :data:`computed` and return ``{"s": s}``."""
    with _computed_lock:
        computed[ctx.jid] = computed.get(ctx.jid, 0) + 1
    deadline = time.monotonic() + float(payload["s"])
    while time.monotonic() < deadline and not ctx.lease_lost:
        time.sleep(0.01)
    return {"s": payload["s"]}


@job("worker.progress", max_retry=0)
def report_progress(payload: Any, ctx: Any) -> int:
    """Report ``payload["steps"]`` steps of progress, one every ``payload["step_s"]`` s,
    with many reports per step (the worker keeps only the latest)."""
    steps = int(payload["steps"])
    for step in range(1, steps + 1):
        for _ in range(50):
            ctx.progress(step, steps, message=f"step {step}")
        time.sleep(float(payload["step_s"]))
    return steps


@job("worker.gc_threshold")
def gc_threshold(payload: Any, ctx: Any) -> int:
    """Return the young-generation threshold of the collector in the worker's process."""
    return gc.get_threshold()[0]
