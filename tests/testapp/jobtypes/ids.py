"""Job types of the job id tests (tests/test_ids*.py, docs/design.md#ids)."""

from __future__ import annotations

from typing import Any

from django_jobqueue.handle import job


@job("ids.draft", queue="ids", max_retry=0, dedupe="1h")
def draft(payload: Any = None, ctx: Any = None) -> Any:
    """Return the value: a message scheduled for later, its id kept for an hour once done."""
    return payload


@job("ids.plain", queue="ids-plain", max_retry=0)
def plain(payload: Any = None, ctx: Any = None) -> Any:
    """Return the value: a job whose id frees as soon as it is done (no dedupe)."""
    return payload
