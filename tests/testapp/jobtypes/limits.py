"""Job types of the flow-control limit tests (tests/test_limits*.py).

None declares a limit: a declared limit would be active in every test of the
process; the tests set theirs at run time (``limits.set_limit``) or with
``override_settings``.
"""

from __future__ import annotations

import time
from typing import Any

from django_jobqueue import job

from .worker import record


@job("limits.run", max_retry=3)
def run(payload: Any, ctx: Any) -> None:
    """Record the run (label: the payload's ``customer``), then sleep ``payload["s"]``
    seconds (``payload["first_s"]`` on the first attempt, when given)."""
    payload = payload or {}
    record(ctx, str(payload.get("customer", "")))
    seconds = payload.get("first_s") if ctx.attempt == 1 and "first_s" in payload else None
    time.sleep(float(payload.get("s", 0) if seconds is None else seconds))


@job("limits.free", max_retry=3)
def free(payload: Any, ctx: Any) -> None:
    """Record the run (label ``free``); a type no limit is set on."""
    record(ctx, "free")
    time.sleep(float((payload or {}).get("s", 0)))
