"""Job types of the unique-key tests (docs/design.md#unique-keys)."""

from __future__ import annotations

import time
from typing import Any

from django_jobqueue import job

QUEUE = "unique"


@job("unique.opt", queue=QUEUE)
def opt(payload: Any, ctx: Any) -> Any:
    """Do nothing: the target of the seed's enqueue examples."""
    return payload


@job("unique.slow", queue=QUEUE)
def uniqueslow(payload: Any, ctx: Any) -> Any:
    """Run about ``payload["seconds"]`` seconds (2 s by default)."""
    time.sleep(payload.get("seconds", 2))
    return payload


@job("unique.produce_options", queue=QUEUE)
def produce_options(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Core ``while_locked``: the second enqueue reuses the key and is deduplicated.

    The mode is docs/design.md#unique-keys.
    """
    key = "optkey-" + payload["probe"]
    r1 = ctx.enqueue_job(
        QUEUE, "unique.opt", {"probe": payload["probe"], "tag": "first"},
        expires_ms=3_600_000, timeout_ms=60_000, unique_key=key, unique_ttl_ms=60_000,
    )  # fmt: skip
    r2 = ctx.enqueue_job(
        QUEUE, "unique.opt", {"probe": payload["probe"], "tag": "second"},
        unique_key=key, unique_ttl_ms=60_000,
    )  # fmt: skip
    return {"r1": dict(r1), "r2": dict(r2)}


@job("unique.produce_unique", queue=QUEUE)
def produce_unique(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Pro ``until_executed``: n=2 reuses the key while n=1 is pending or running.

    The mode is docs/design.md#unique-keys.
    """
    key = "um-" + payload["probe"]
    r1 = ctx.enqueue_job(
        QUEUE, "unique.slow", {"probe": payload["probe"], "n": 1, "seconds": 2},
        unique_key=key, unique_mode="until_executed",
    )  # fmt: skip
    r2 = ctx.enqueue_job(
        QUEUE, "unique.slow", {"probe": payload["probe"], "n": 2, "seconds": 2},
        unique_key=key, unique_mode="until_executed",
    )  # fmt: skip
    return {"r1": dict(r1), "r2": dict(r2)}
