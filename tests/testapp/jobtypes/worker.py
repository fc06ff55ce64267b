"""Job types of the worker tests (tests/worker/): each records its runs in RunRecord."""

from __future__ import annotations

import asyncio
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
    """Record the run, then sleep ``payload["s"]`` seconds (only on the attempts listed
    in ``payload["attempts"]``, all when absent)."""
    record(ctx, str(payload.get("label", "sleep")))
    attempts = payload.get("attempts")
    if attempts is None or ctx.attempt in attempts:
        deadline = time.monotonic() + float(payload["s"])
        while time.monotonic() < deadline and not ctx.cancelled:
            time.sleep(0.02)


@job("worker.async", max_retry=0)
async def async_run(payload: Any, ctx: Any) -> str:
    """An async handler: record the run from a thread, return a value."""
    await asyncio.sleep(0)
    from asgiref.sync import sync_to_async

    await sync_to_async(record)(ctx, "async")
    return "async-ok"


@job("worker.limited", concurrent=1, max_retry=0)
def limited(payload: Any, ctx: Any) -> None:
    """Record the run and how many limited jobs overlap (concurrent=1)."""
    record(ctx, "limited")
    time.sleep(float((payload or {}).get("s", 0.05)))


@job("worker.spawn", max_retry=0)
def spawn_child(payload: Any, ctx: Any) -> str:
    """Enqueue a worker.record child through the context; return its jid."""
    record(ctx, "parent")
    return ctx.enqueue_job(None, "worker.record", {"label": "child"})["jid"]
