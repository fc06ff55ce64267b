"""Job types of the resumable steps tests (tests/worker/test_steps*.py).

Every step writes RunRecord rows (label: the step, or ``item-<n>`` for a cursor's
items) inside the step, so a test counts how many times each step's writes
committed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django_jobqueue import job


def record(ctx: Any, label: str) -> None:
    """Write one RunRecord row for ``label`` (in the caller's transaction, if any)."""
    from tests.testapp.models import RunRecord

    RunRecord.objects.create(jid=ctx.jid, label=label, attempt=ctx.attempt, worker=ctx.worker)


def pause(ctx: Any, payload: dict[str, Any], point: str) -> None:
    """Sleep (up to 120 s, until the lease is lost) at ``point`` when the payload's
    ``pauses`` name this attempt there: where a kill test SIGKILLs the worker."""
    if payload.get("pauses", {}).get(point) != ctx.attempt:
        return
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not ctx.lease_lost:
        time.sleep(0.02)


@job("steps.pay", max_retry=5)
def pay(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A payment: reserve, charge, then ship ``payload["items"]`` items with a cursor.

    ``payload["fail"]`` maps a point (``"charge"``, ``"item-2"``) to the attempt that
    raises there, after that point's write; ``payload["pauses"]`` maps a point
    (``"after-reserve"``, ``"item-1"``) to the attempt that sleeps there.
    """
    fail = payload.get("fail", {})

    def fail_at(point: str) -> None:
        if fail.get(point) == ctx.attempt:
            raise RuntimeError(f"failed at {point}")

    @ctx.step("reserve")
    def reservation(step: Any) -> dict[str, Any]:
        record(ctx, "reserve")
        fail_at("reserve")
        return {"reservation": f"r-{ctx.jid}", "attempt": ctx.attempt}

    pause(ctx, payload, "after-reserve")

    @ctx.step("charge")
    def charge(step: Any) -> dict[str, Any]:
        record(ctx, "charge")
        fail_at("charge")
        return {"charge": f"c-{reservation['reservation']}", "attempt": ctx.attempt}

    pause(ctx, payload, "after-charge")

    @ctx.step("ship")
    def shipped(step: Any) -> int:
        start = step.cursor or 0
        for n in range(start, int(payload.get("items", 3))):
            record(ctx, f"item-{n}")
            fail_at(f"item-{n}")
            step.save(n + 1)
            pause(ctx, payload, f"item-{n}")
        return int(payload.get("items", 3))

    return {"reservation": reservation, "charge": charge, "shipped": shipped}


#: The step names ``steps.deployed`` runs, in order: a test changes it between two
#: attempts of one job, as a deploy would change the handler's code.
DEPLOYED: dict[str, list[str]] = {"order": ["a", "b", "c"]}


@job("steps.deployed", max_retry=3)
def deployed(payload: dict[str, Any], ctx: Any) -> list[Any]:
    """Run the steps of :data:`DEPLOYED` in order, each writing a RunRecord; the step
    named ``payload["fail"]`` raises after its write on attempt 1."""
    results = []
    for name in DEPLOYED["order"]:

        @ctx.step(name)
        def result(step: Any, name: str = name) -> str:
            record(ctx, name)
            if payload.get("fail") == name and ctx.attempt == 1:
                raise RuntimeError(f"failed at {name}")
            return name

        results.append(result)
    return results


#: Callables a test runs inside ``steps.hooked``'s step (by jid), before its write.
HOOKS: dict[str, Callable[[], None]] = {}
#: What ``steps.hooked``'s step raised, by jid.
RAISED: dict[str, BaseException] = {}


@job("steps.hooked", max_retry=0)
def hooked(payload: dict[str, Any], ctx: Any) -> str:
    """One step that runs the test's hook (``payload["before"]``: before the step
    begins, else inside it), then writes a RunRecord; what it raises is kept."""
    hook = HOOKS.get(ctx.jid, lambda: None)
    if payload.get("before"):
        hook()
    try:

        @ctx.step("write")
        def written(step: Any) -> str:
            if not payload.get("before"):
                hook()
            record(ctx, "write")
            return "written"

    except Exception as exc:
        RAISED[ctx.jid] = exc
        raise
    return written


@job("steps.always_fails", max_retry=1)
def always_fails(payload: Any, ctx: Any) -> None:
    """A done step, then one that always raises (after its write)."""

    @ctx.step("first")
    def first(step: Any) -> str:
        record(ctx, "first")
        return "ok"

    @ctx.step("second")
    def second(step: Any) -> None:
        record(ctx, "second")
        raise RuntimeError("second failed")


@job("steps.twice", max_retry=0)
def twice(payload: Any, ctx: Any) -> None:
    """Begin step "one" twice in one handler."""
    ctx.step("one")(lambda step: 1)
    try:
        ctx.step("one")(lambda step: 2)
    except Exception as exc:
        RAISED[ctx.jid] = exc
        raise


@job("steps.again", max_retry=0)
def again(payload: Any, ctx: Any) -> int:
    """Retry one step in the handler until its third try; then let step "broken"
    raise, swallow it, and begin step "after" (kept in :data:`RAISED`)."""
    tries: list[int] = []

    def flaky(step: Any) -> int:
        record(ctx, f"flaky-{len(tries)}")
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionError("try again")
        return len(tries)

    value = 0
    for _ in range(3):  # an in-handler retry loop around one step
        try:
            value = ctx.step("flaky")(flaky)
            break
        except ConnectionError:
            continue
    try:
        ctx.step("broken")(lambda step: 1 / 0)
    except ZeroDivisionError:
        pass
    try:
        ctx.step("after")(lambda step: 1)
    except Exception as exc:
        RAISED[ctx.jid] = exc
    return value


@job("steps.misuse", max_retry=0)
def misuse(payload: dict[str, Any], ctx: Any) -> None:
    """Misuse steps in the way ``payload["kind"]`` names; what it raises is kept."""
    from django.db import transaction

    from django_jobqueue.enqueue import jobs_database

    kind = payload["kind"]
    try:
        if kind == "with":
            with ctx.step("charge"):
                record(ctx, "with-body")
        elif kind == "atomic":
            with transaction.atomic(using=jobs_database()):
                ctx.step("charge")(lambda step: None)
        elif kind == "result":

            @ctx.step("charge")
            def charge(step: Any) -> object:
                record(ctx, "charge")
                return object()

        elif kind == "save_outside":
            step = ctx.step("charge")
            step(lambda step: None)
            step.save(1)
        elif kind == "save_in_atomic":

            @ctx.step("charge")
            def nested(step: Any) -> None:
                with transaction.atomic(using=jobs_database()):
                    record(ctx, "nested")
                    step.save(1)

        elif kind == "name":
            ctx.step("")
    except Exception as exc:
        RAISED[ctx.jid] = exc
        raise


@job("steps.pair", max_retry=0)
def pair(payload: Any, ctx: Any) -> Any:
    """Return a step's fresh result, a tuple, as the handler sees it."""
    return {"seen": repr(ctx.step("pair")(lambda step: (1, 2)))}


@job("steps.async", max_retry=2)
async def async_steps(payload: Any, ctx: Any) -> Any:
    """An async handler's steps, through ``sync_to_async`` (docs/workflows.md)."""
    from asgiref.sync import sync_to_async

    def first(step: Any) -> str:
        record(ctx, "async-first")
        return "first"

    def second(step: Any) -> str:
        record(ctx, "async-second")
        if ctx.attempt == 1:
            raise RuntimeError("async second failed")
        return "second"

    one = await sync_to_async(ctx.step("first"))(first)
    two = await sync_to_async(ctx.step("second"))(second)
    return [one, two]


@job("steps.after_idle", max_retry=0)
def after_idle(payload: dict[str, Any], ctx: Any) -> str:
    """Compute (sleep) ``payload["s"]`` seconds, then write in a step."""
    time.sleep(float(payload["s"]))

    @ctx.step("write")
    def written(step: Any) -> str:
        record(ctx, "after_idle")
        return "written"

    return written


@job("steps.slow", max_retry=1, timeout="1s")
def slow(payload: dict[str, Any], ctx: Any) -> str:
    """One step that writes, then (on attempt 1 only) sleeps ``payload["s"]`` seconds,
    past the 1 s timeout; what the step raises is kept."""
    try:

        @ctx.step("slow")
        def finished(step: Any) -> str:
            record(ctx, "slow")
            if ctx.attempt == 1:
                time.sleep(float(payload["s"]))
            return "finished"

    except Exception as exc:
        RAISED[ctx.jid] = exc
        raise
    return finished


@job("steps.cursor_hooked", max_retry=0)
def cursor_hooked(payload: Any, ctx: Any) -> int:
    """A step that saves its cursor after each of three items, and runs the test's
    hook (:data:`HOOKS`) after the first save; what it raises is kept."""
    hook = HOOKS.get(ctx.jid, lambda: None)
    try:

        @ctx.step("items")
        def items(step: Any) -> int:
            for n in range(step.cursor or 0, 3):
                record(ctx, f"item-{n}")
                step.save(n + 1)
                if n == 0:
                    hook()
            return 3

    except Exception as exc:
        RAISED[ctx.jid] = exc
        raise
    return items
