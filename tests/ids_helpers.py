"""Helpers of the job id tests (tests/test_ids*.py, docs/design.md#ids): their queue and id, a
worker's claim of their jobs, and the job holding an id.
"""

from __future__ import annotations

from django_jobqueue import storage
from django_jobqueue.models import Job, hold_hash

USING = "default"
QUEUE = "ids"
ID = "chat:7:draft-1"


def claim(queue: str = QUEUE, limit: int = 1) -> list[Job]:
    return storage.claim(USING, owner="test", limit=limit, queues=[queue])


def holder(job_id: str = ID, queue: str = QUEUE) -> Job | None:
    return Job.objects.filter(queue=queue, job_id_hash=hold_hash(job_id)).first()
