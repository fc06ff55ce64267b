"""Job types of the start and prefetch tests (tests/worker/test_starts*.py).

Each records every start of its handler, in RunRecord (label = the job type's short
name) or in a file the test names, so a test counts real starts, whatever the job's
stored attempt says.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import transaction

from django_jobqueue import job


def _record(ctx: Any, label: str) -> None:
    from tests.testapp.models import RunRecord

    RunRecord.objects.create(jid=ctx.jid, label=label, attempt=ctx.attempt, worker=ctx.worker)


def _note(path: str, ctx: Any) -> None:
    """Append ``jid attempt`` to the file ``path``: a start counted without a statement."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{ctx.jid} {ctx.attempt}\n".encode())
    finally:
        os.close(fd)


@job("starts.crash", max_retry=2)
def crash(payload: Any, ctx: Any) -> None:
    """Note the start in ``payload["path"]``, then end the whole process at once (no
    cleanup, no outcome)."""
    _note(payload["path"], ctx)
    os._exit(3)


@job("starts.quick", max_retry=3)
def quick(payload: Any, ctx: Any) -> None:
    """Note the start in ``payload["path"]`` when given, else in RunRecord."""
    if payload and payload.get("path"):
        _note(payload["path"], ctx)
    else:
        _record(ctx, "quick")


@job("starts.nap", max_retry=3)
def nap(payload: Any, ctx: Any) -> None:
    """Record the start, then sleep ``payload["s"]`` seconds (less once its lease is lost)."""
    _record(ctx, "nap")
    deadline = time.monotonic() + float(payload.get("s", 0))
    while time.monotonic() < deadline and not ctx.lease_lost:
        time.sleep(0.02)


@job("starts.gather", max_retry=0, timeout="2m")
def gather(payload: Any, ctx: Any) -> dict[str, Any]:
    """Record the start, then wait until ``payload["n"]`` gather jobs have started (or
    ``payload["s"]`` seconds passed); return whether they all ran at once."""
    from tests.testapp.models import RunRecord

    _record(ctx, "gather")
    deadline = time.monotonic() + float(payload.get("s", 30))
    while time.monotonic() < deadline:
        if RunRecord.objects.filter(label="gather").count() >= int(payload["n"]):
            return {"together": True}
        time.sleep(0.05)
    return {"together": False}


@job("starts.write_after_idle", max_retry=0)
def write_after_idle(payload: Any, ctx: Any) -> None:
    """Compute (sleep) ``payload["s"]`` seconds with no statement, then write through
    the ORM: inside ``atomic()`` when ``payload["atomic"]``."""
    time.sleep(float(payload["s"]))
    if payload.get("atomic"):
        with transaction.atomic():
            _record(ctx, "after_idle")
    else:
        _record(ctx, "after_idle")
