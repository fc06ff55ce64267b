"""Job types of the schedule tests (tests/test_schedules*.py).

None declares a cron: a declared plan would be synced by every foreman test.
"""

from __future__ import annotations

from typing import Any

from django_jobqueue import job


@job("schedules.tick")
def tick(payload: Any, ctx: Any) -> None:
    """Do nothing: the tests count the jobs a plan makes, not their runs."""


@job("schedules.digest", queue="digests")
def digest(payload: Any, ctx: Any) -> None:
    """Do nothing: the target of the declared plans of the tests."""
