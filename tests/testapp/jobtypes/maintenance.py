"""Job types of the admin, command and maintenance tests."""

from __future__ import annotations

from typing import Any

from django_jobqueue import job


@job("maint.noop", queue="default")
def noop(payload: Any, ctx: Any) -> None:
    """Do nothing."""


@job("maint.secret", queue="vault", secure=True)
def secret(payload: Any, ctx: Any) -> dict[str, str]:
    """Pretend to handle a secret."""
    return {"token": "never-shown"}
