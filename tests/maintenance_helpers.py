"""Helpers of the admin, command and maintenance tests: jobs made straight in the table."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from django_jobqueue.models import Job, JobStatus, hold_hash

#: Statuses whose jobs are waiting (``waiting`` is True exactly for these).
_WAITING = {JobStatus.INIT, JobStatus.RETRY}


def job_fields(**fields: Any) -> dict[str, Any]:
    """Return the fields of a job row: defaults, then ``fields``.

    ``status`` sets ``waiting`` to match; ``job_id``/``unique_key`` set their hash
    (the hold) unless the hash is given; ``age`` (a timedelta) backdates
    ``finished_at`` and ``updated_at`` of a finished job.
    """
    now = timezone.now()
    age = fields.pop("age", None)
    status = fields.setdefault("status", JobStatus.INIT)
    values: dict[str, Any] = {
        "jid": uuid.uuid4().hex,
        "queue": "default",
        "job_type": "maint.noop",
        "payload": {"n": 1},
        "run_at": now,
        "waiting": status in _WAITING,
    }
    if status in (JobStatus.DONE, JobStatus.ERROR, JobStatus.MAX_RETRY, JobStatus.CANCELLED):
        values["finished_at"] = now - (age or timedelta(0))
        values["updated_at"] = now - (age or timedelta(0))
    if fields.get("job_id") is not None and "job_id_hash" not in fields:
        values["job_id_hash"] = hold_hash(fields["job_id"])
    if fields.get("unique_key") is not None and "unique_key_hash" not in fields:
        values["unique_key_hash"] = hold_hash(fields["unique_key"])
        values.setdefault("unique_mode", "while_locked")
    values.update(fields)
    return values


def make_job(**fields: Any) -> Job:
    """Create one job row; see :func:`job_fields`.

    Straight in the table through Django's base manager: ``Job.objects`` refuses
    ``create()`` (jobs are made by ``enqueue_job``), and these rows are fixtures.
    """
    return Job._base_manager.create(**job_fields(**fields))


def make_jobs(count: int, **fields: Any) -> list[Job]:
    """Create ``count`` job rows with one INSERT per 500; see :func:`make_job`."""
    return Job._base_manager.bulk_create([Job(**job_fields(**fields)) for _ in range(count)], 500)


def running(owner: str = "host:1:worker-1", *, lease_s: int = 60, **fields: Any) -> Job:
    """Create a ``processing`` job leased by ``owner`` for ``lease_s`` more seconds."""
    now = timezone.now()
    return make_job(
        status=JobStatus.PROCESSING,
        attempt=1,
        lease_owner=owner,
        lease_token=uuid.uuid4().hex,
        lease_expires_at=now + timedelta(seconds=lease_s),
        heartbeat_at=now,
        started_at=now,
        **fields,
    )
