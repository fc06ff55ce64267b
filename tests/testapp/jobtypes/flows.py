"""Job types of the batch and workflow tests (tests/flows/): each records its runs in
RunRecord, with the upstream results it read."""

from __future__ import annotations

from typing import Any

from django_jobqueue import NonRetryableError, job

from .worker import record


@job("flows.step", max_retry=0)
def step(payload: Any, ctx: Any) -> dict[str, Any]:
    """Record the run (label: the payload's ``label``); return the label and the
    upstream results it read; fail for good when the payload says ``fail``."""
    payload = payload or {}
    label = str(payload.get("label", ""))
    record(ctx, label)
    if payload.get("fail"):
        raise NonRetryableError(f"{label} fails")
    upstream = {key: ctx.upstream[key] for key in ctx.upstream}
    return {"label": label, "upstream": upstream}


@job("flows.noop", max_retry=0)
def noop(payload: Any, ctx: Any) -> None:
    """Do nothing: the small job of the batch drains."""


@job("flows.callback", max_retry=3)
def callback(payload: Any, ctx: Any) -> dict[str, Any]:
    """Record a batch callback's run (label: ``callback:<kind>``, from the payload's
    own ``payload``) and return what it was given."""
    kind = str((payload.get("payload") or {}).get("kind", ""))
    record(ctx, f"callback:{kind}")
    return payload


@job("flows.fan_out", max_retry=0)
def fan_out(payload: Any, ctx: Any) -> int:
    """Add ``payload["n"]`` noop jobs to this job's batch (an open batch)."""
    record(ctx, "fan_out")
    for _ in range(int(payload["n"])):
        ctx.batch.enqueue("flows.noop", None)
    return int(payload["n"])


@job("flows.flaky", max_retry=0)
def flaky(payload: Any, ctx: Any) -> str:
    """Fail for good on this job's first run, succeed on any later one (a retry)."""
    from tests.testapp.models import RunRecord

    label = str((payload or {}).get("label", "flaky"))
    record(ctx, label)
    if RunRecord.objects.filter(jid=ctx.jid).count() == 1:
        raise NonRetryableError(f"{label} fails once")
    return label


@job("flows.tick", max_retry=5)
def tick(payload: Any, ctx: Any) -> None:
    """Record the run and take 10 ms: a small job of the SIGKILL drain (retried when
    its worker is killed under it), long enough that the drain outlasts the kills."""
    import time

    record(ctx, "tick")
    time.sleep(0.01)
