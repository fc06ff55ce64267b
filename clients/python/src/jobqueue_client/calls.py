"""The gateway's routes as request descriptions, shared by the sync and async clients.

Each function returns a :class:`Call`: the method, path, JSON body, query and how to
read the answer. :class:`~jobqueue_client.Client` and
:class:`~jobqueue_client.AsyncClient` only send them, so the two cannot differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar
from urllib.parse import quote

from .types import (
    BulkResult,
    CancelResult,
    ClaimedJob,
    Enqueued,
    IdJob,
    Job,
    Page,
    Registration,
    from_json,
)

__all__ = ["Call", "EnqueueOptions", "job_body"]

T = TypeVar("T")


class EnqueueOptions(TypedDict, total=False):
    """The options of one job, as ``enqueue_job`` takes them (``docs/gateway.md``).

    ``delay`` is ``"500ms"``, ``"5s"``, ``"1m"`` or seconds; ``run_at`` an aware
    datetime (or an ISO 8601 string with an offset); ``*_ms`` are milliseconds;
    ``limit_key`` the key a partitioned limit counts the job under (``docs/limits.md``);
    ``batch`` (an open batch's id), ``after`` (jids the job waits for) and
    ``on_upstream_failure`` (``"cancel"``, ``"skip"``, ``"ignore"``) link it into a
    workflow (``docs/workflows.md``): the gateway takes them on one enqueue, not in a
    batch.
    """

    queue: str
    priority: int
    delay: str | float
    run_at: datetime | str
    expires_ms: int
    timeout_ms: int
    max_retry: int
    unique_key: str
    unique_mode: Literal["while_locked", "until_executing", "until_executed"]
    unique_ttl_ms: int
    id: str
    limit_key: str
    batch: int
    after: Sequence[str]
    on_upstream_failure: Literal["cancel", "skip", "ignore"]


_OPTIONS = frozenset(EnqueueOptions.__annotations__)


@dataclasses.dataclass(frozen=True)
class Call(Generic[T]):
    """One request: ``parse`` reads a 2xx JSON body; ``missing`` is returned for 404."""

    method: str
    path: str
    parse: Callable[[Any], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    none_on_404: bool = False


def _json_time(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


def job_body(job_type: str, payload: Any = None, **options: Any) -> dict[str, Any]:
    """Return the JSON of one job (``JobIn``) from a job type, payload and options.

    Raises
    ------
    TypeError
        If an option is not one of :class:`EnqueueOptions`.
    """
    unknown = set(options) - _OPTIONS
    if unknown:
        raise TypeError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
    body: dict[str, Any] = {"job_type": job_type, "payload": payload}
    for name, value in options.items():
        if value is not None:
            if name == "run_at":
                value = _json_time(value)
            elif name == "after":
                value = list(value)
            body[name] = value
    return body


def _segment(text: str) -> str:
    return quote(text, safe="")


def _id_path(queue: str, job_id: str) -> str:
    return f"/queues/{_segment(queue)}/ids/{quote(job_id, safe='/')}"


def _value_body(
    value: Any, job_type: str | None, at: datetime | str | None, delay: str | float | None
) -> dict[str, Any]:
    body: dict[str, Any] = {"value": value}
    if job_type is not None:
        body["job_type"] = job_type
    if at is not None:
        body["at"] = _json_time(at)
    if delay is not None:
        body["delay"] = delay
    return body


def enqueue(job_type: str, payload: Any, options: Mapping[str, Any]) -> Call[Enqueued]:
    return Call(
        "POST",
        "/jobs",
        lambda d: from_json(Enqueued, d),
        json=job_body(job_type, payload, **options),
    )


def enqueue_batch(jobs: Sequence[Mapping[str, Any]]) -> Call[list[Enqueued]]:
    bodies = [job_body(**dict(job)) for job in jobs]
    return Call(
        "POST",
        "/jobs/batch",
        lambda d: [from_json(Enqueued, r) for r in d["results"]],
        json={"jobs": bodies},
    )


def get_job(jid: str) -> Call[Job]:
    return Call("GET", f"/jobs/{_segment(jid)}", lambda d: from_json(Job, d))


def cancel(jid: str) -> Call[CancelResult]:
    return Call("POST", f"/jobs/{_segment(jid)}/cancel", lambda d: from_json(CancelResult, d))


def retry(jid: str) -> Call[bool]:
    return Call("POST", f"/jobs/{_segment(jid)}/retry", lambda d: bool(d["retried"]))


def bulk(action: Literal["retry", "cancel", "delete"], job_filter: str) -> Call[BulkResult]:
    return Call(
        "POST",
        "/jobs/bulk",
        lambda d: from_json(BulkResult, d),
        json={"action": action, "filter": job_filter},
    )


def id_verb(
    verb: Literal["add", "set", "update"],
    queue: str,
    job_id: str,
    value: Any,
    job_type: str | None,
    at: datetime | str | None,
    delay: str | float | None,
) -> Call[bool]:
    answer = {"add": "added", "set": "set", "update": "updated"}[verb]
    return Call(
        "POST",
        f"{_id_path(queue, job_id)}/{verb}",
        lambda d: bool(d[answer]),
        json=_value_body(value, job_type, at, delay),
    )


def id_cancel(queue: str, job_id: str) -> Call[bool]:
    return Call("POST", f"{_id_path(queue, job_id)}/cancel", lambda d: bool(d["cancelled"]))


def id_get(queue: str, job_id: str) -> Call[IdJob | None]:
    return Call("GET", _id_path(queue, job_id), lambda d: from_json(IdJob, d), none_on_404=True)


def id_list(
    queue: str, prefix: str | None, state: str | None, limit: int | None, cursor: str | None
) -> Call[Page]:
    params = {
        k: v
        for k, v in (("prefix", prefix), ("state", state), ("limit", limit), ("cursor", cursor))
        if v is not None
    }
    return Call(
        "GET",
        f"/queues/{_segment(queue)}/jobs",
        lambda d: Page([from_json(IdJob, j) for j in d["jobs"]], d.get("next")),
        params=params,
    )


def register(body: Mapping[str, Any]) -> Call[Registration]:
    return Call("POST", "/worker/register", lambda d: from_json(Registration, d), json=dict(body))


def stop_worker(name: str) -> Call[bool]:
    return Call("POST", "/worker/stop", lambda d: bool(d["stopped"]), json={"name": name})


def claim(body: Mapping[str, Any]) -> Call[list[ClaimedJob]]:
    return Call(
        "POST",
        "/worker/claim",
        lambda d: [from_json(ClaimedJob, j) for j in d["jobs"]],
        json=dict(body),
    )


def heartbeat(
    jid: str, lease_token: str, lease_ms: int | None, progress: Mapping[str, Any] | None = None
) -> Call[bool]:
    body: dict[str, Any] = {"lease_token": lease_token}
    if lease_ms is not None:
        body["lease_ms"] = lease_ms
    if progress is not None:
        body["progress"] = dict(progress)
    return Call(
        "POST",
        f"/worker/jobs/{_segment(jid)}/heartbeat",
        lambda d: bool(d["cancel_requested"]),
        json=body,
    )


def complete(jid: str, lease_token: str, result: Any) -> Call[str]:
    return Call(
        "POST",
        f"/worker/jobs/{_segment(jid)}/complete",
        lambda d: str(d["status"]),
        json={"lease_token": lease_token, "result": result},
    )


def fail(
    jid: str,
    lease_token: str,
    error: str,
    exception_class: str,
    retry: bool,
    cancelled: bool,
) -> Call[str]:
    return Call(
        "POST",
        f"/worker/jobs/{_segment(jid)}/fail",
        lambda d: str(d["status"]),
        json={
            "lease_token": lease_token,
            "error": error[:10_000] or "failed",
            "exception_class": exception_class[:200],
            "retry": retry,
            "cancelled": cancelled,
        },
    )
