"""Job types of the no-duplicate tests (tests/test_no_duplicate.py)."""

from __future__ import annotations

from typing import Any

from django_jobqueue.handle import job


@job("nodup.noop", queue="nodup", max_retry=0)
def noop(payload: Any, ctx: Any) -> None:
    """Do nothing: the no-duplicate tests only create and claim these jobs."""
