"""Flow-control limits over HTTP (admin scope): list, set and clear (docs/limits.md).

The same verbs as ``manage.py jobqueue limits`` and the console, written to the audit
log; a bad target or limit is a ``422 invalid_request`` naming the field, and writes
nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

from django.http import HttpRequest
from ninja import Router, Schema
from pydantic import ConfigDict, Field, StrictBool, StrictStr

from ..core.exceptions import InvalidOption
from ..core.limitspec import InvalidLimit
from ..overview import jobs_database
from ..store import limits
from ..store.audit import run_audited
from .auth import actor_of, origin_of, require
from .errors import from_jobqueue_error
from .schemas import ERRORS, Storable

__all__ = ["router"]

router = Router(tags=["limits"])

Target = Annotated[StrictStr, Field(min_length=1, max_length=210), Storable]
Count = Annotated[int, Field(strict=True, ge=1, le=1_000_000)]


class LimitIn(Schema):
    """A target's limit, set at run time (docs/limits.md); no concurrency and no rate
    lifts the declared limit until cleared."""

    model_config = ConfigDict(extra="forbid")

    target: Target = Field(description="type:<job type> or queue:<queue>.")
    concurrency: Count | None = Field(None, description="Most jobs processing at once.")
    rate: Annotated[StrictStr, Field(max_length=32)] | None = Field(
        None, description="Most starts per window: N/s, N/m or N/h."
    )
    burst: Count | None = Field(None, description="The rate's bucket.")
    partition: Annotated[StrictStr, Field(max_length=200), Storable] | None = Field(
        None, description="payload.<field>, or key (the enqueue's limit_key)."
    )
    fair: StrictBool = Field(default=False, description="Rotate claims across keys.")


class TargetIn(Schema):
    """The target of ``POST /sdk/limits/clear``."""

    model_config = ConfigDict(extra="forbid")

    target: Target = Field(description="type:<job type> or queue:<queue>.")


class LimitOut(Schema):
    """One target's limits and use."""

    target: str
    declared: dict[str, Any] | None = Field(description="The declared limit; null: none.")
    override: dict[str, Any] | None = Field(description="The run-time limit; null: none.")
    effective: dict[str, Any] = Field(description="The limit in force; {}: none.")
    in_flight: int = Field(description="Jobs of the target processing now.")
    waiting: int = Field(description="Due jobs of the target.")
    keys: list[tuple[str, int]] = Field(description="Busiest keys: (key, in flight).")


class LimitsOut(Schema):
    """Body of ``GET /sdk/limits``."""

    limits: list[LimitOut]


class LimitSetOut(Schema):
    """Body of ``POST /sdk/limits``."""

    target: str
    effective: dict[str, Any] = Field(description="The limit now in force; {}: none.")


class ClearedOut(Schema):
    """Body of ``POST /sdk/limits/clear``."""

    cleared: bool = Field(description="Whether there was a run-time limit.")


@router.get(
    "/limits",
    response={200: LimitsOut, **ERRORS},
    summary="Every limit, declared or set, with its use (admin scope)",
    operation_id="limits_list",
)
def limits_list(request: HttpRequest) -> Any:
    """Every declared or run-time limit, its in-flight jobs and busiest keys."""
    require(request, "admin")
    return {"limits": limits.limit_rows(jobs_database())}


@router.post(
    "/limits",
    response={200: LimitSetOut, **ERRORS},
    summary="Set a target's limit at run time (admin scope)",
    operation_id="limits_set",
)
def limits_set(request: HttpRequest, body: LimitIn) -> Any:
    """Every worker applies it within a second; it wins until cleared."""
    token = require(request, "admin")
    using = jobs_database()
    given = body.model_dump(exclude={"target"}, exclude_none=True)
    if not given.get("fair"):
        given.pop("fair", None)
    try:
        limit = run_audited(
            using,
            lambda: limits.set_limit(using, body.target, given, by=origin_of(token)),
            actor_of(token),
            "limit_set",
            target=body.target,
            counts=lambda _limit: {"changed": 1},
        )
    except InvalidOption as exc:
        field = exc.field if isinstance(exc, InvalidLimit) else None
        raise from_jobqueue_error(exc, field=field) from exc
    return {"target": body.target, "effective": limit.as_dict() if limit.active else {}}


@router.post(
    "/limits/clear",
    response={200: ClearedOut, **ERRORS},
    summary="Clear a target's run-time limit (admin scope)",
    operation_id="limits_clear",
)
def limits_clear(request: HttpRequest, body: TargetIn) -> Any:
    """The declared limit applies again within a second."""
    token = require(request, "admin")
    using = jobs_database()
    try:
        cleared = run_audited(
            using,
            lambda: limits.clear_limit(using, body.target),
            actor_of(token),
            "limit_clear",
            target=body.target,
            counts=lambda cleared: {"changed": int(cleared)},
        )
    except InvalidOption as exc:
        raise from_jobqueue_error(exc, field="target") from exc
    return {"cleared": cleared}
