"""Job ids (docs/design.md#ids) byte for byte, and pages: ids of 1 to 1024 bytes compared byte
for byte, and list() by prefix and state, a page at a time (at most 1000 jobs and
4 MiB of values).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from django_jobqueue import storage
from django_jobqueue.core.exceptions import InvalidJobId, InvalidOption
from django_jobqueue.ids import MAX_PAGE_BYTES, Page
from django_jobqueue.models import Job, hold_hash
from tests.ids_helpers import QUEUE, claim
from tests.testapp.jobtypes.ids import draft

# -- ids byte for byte ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("job_id", ["", "x" * 1025, "é" * 513, 7, "\ud800"], ids=repr)
def test_ids_outside_1_to_1024_bytes_are_refused(job_id):
    calls = (
        lambda: draft.add("v", id=job_id),
        lambda: draft.set(job_id, "v"),
        lambda: draft.update(job_id, "v"),
        lambda: draft.cancel(job_id),
        lambda: draft.get(job_id),
    )
    for call in calls:
        with pytest.raises(InvalidJobId):
            call()
    assert Job.objects.count() == 0


@pytest.mark.django_db
def test_id_of_1024_bytes_is_accepted():
    job_id = "é" * 512
    assert draft.add("v", id=job_id) is True
    assert draft.get(job_id).id == job_id


@pytest.mark.django_db
def test_ids_compare_byte_for_byte():
    for job_id in ("Chat:1", "chat:1", "é", "e", "e\u0301"):
        assert draft.add(job_id, id=job_id) is True
    assert Job.objects.filter(queue=QUEUE).count() == 5
    assert draft.get("Chat:1").value == "Chat:1"
    assert draft.update("chat:1", "new") is True
    assert draft.get("Chat:1").value == "Chat:1"
    assert draft.cancel("e") is True
    assert draft.get("é").value == "é"
    assert draft.get("e\u0301").value == "e\u0301"


# -- list() and its pages ---------------------------------------------------------


@pytest.mark.django_db
def test_list_prefix_is_literal_and_byte_exact():
    for job_id in ("ab", "a_1", "a%1", "a\\1", "A_2", "Chat:1", "chat:2", "é:1", "e:1"):
        draft.add(None, id=job_id)

    def ids(prefix: str) -> list[str]:
        return [job.id for job in draft.list(prefix=prefix).jobs]

    assert ids("a_") == ["a_1"]
    assert ids("a%") == ["a%1"]
    assert ids("a\\") == ["a\\1"]
    assert ids("a") == ["ab", "a_1", "a%1", "a\\1"]
    assert ids("chat:") == ["chat:2"]
    assert ids("Chat:") == ["Chat:1"]
    assert ids("é") == ["é:1"]
    assert ids("e") == ["e:1"]


@pytest.mark.django_db
def test_list_by_state_and_failed_latest_first():
    now = timezone.now()
    for i in range(3):
        draft.add(i, id=f"f:{i}")
    for _ in range(3):
        (job,) = claim()
        storage.fail(job, RuntimeError("boom"), retryable=False)
    for i, job in enumerate(Job.objects.filter(queue=QUEUE).order_by("pk")):
        Job.objects.filter(pk=job.pk).update(finished_at=now - timedelta(minutes=10 - i))
    draft.add("w", id="w:1")
    draft.add("s", id="s:1", delay="1h")
    assert [j.id for j in draft.list(state="failed").jobs] == ["f:2", "f:1", "f:0"]
    assert [j.id for j in draft.list(state="waiting").jobs] == ["w:1"]
    assert [j.id for j in draft.list(state="scheduled").jobs] == ["s:1"]
    assert [j.state for j in draft.list().jobs] == ["failed"] * 3 + ["waiting", "scheduled"]
    seen = []
    page = draft.list(state="failed", limit=1)
    while True:
        seen += [j.id for j in page.jobs]
        if page.next is None:
            break
        page = draft.list(state="failed", limit=1, after=page.next)
    assert seen == ["f:2", "f:1", "f:0"]


@pytest.mark.django_db
def test_list_rejects_bad_arguments():
    for kwargs in ({"limit": 0}, {"limit": 1001}, {"state": "gone"}, {"after": "junk"}):
        with pytest.raises(InvalidOption):
            draft.list(**kwargs)
    draft.add(1, id="x:1")
    draft.add(2, id="x:2")
    cursor = draft.list(limit=1).next
    with pytest.raises(InvalidOption):
        draft.list(state="failed", after=cursor)


def _bulk_jobs(queue: str, job_type: str, job_ids: list[str], payload: Any = None) -> None:
    import uuid

    now = timezone.now()
    # Fixtures straight in the table: Job.objects refuses bulk_create.
    Job._base_manager.bulk_create(
        [
            Job(
                jid=uuid.uuid4().hex,
                queue=queue,
                job_type=job_type,
                job_id=job_id,
                job_id_hash=hold_hash(job_id),
                payload=payload,
                run_at=now,
            )
            for job_id in job_ids
        ],
        batch_size=500,
    )


@pytest.mark.django_db
def test_pages_of_2500_jobs_return_each_once_in_order():
    wanted = [f"page:{i:05d}" for i in range(2500)]
    _bulk_jobs(QUEUE, "ids.draft", wanted[:1200])
    _bulk_jobs(QUEUE, "ids.draft", [f"other:{i}" for i in range(50)])
    _bulk_jobs(QUEUE, "ids.draft", wanted[1200:])
    sizes, seen = [], []
    page = draft.list(prefix="page:", limit=1000)
    while True:
        sizes.append(len(page.jobs))
        seen += [job.id for job in page.jobs]
        if page.next is None:
            break
        page = draft.list(prefix="page:", limit=1000, after=page.next)
    assert sizes == [1000, 1000, 500]
    assert seen == wanted


@pytest.mark.django_db
@override_settings(JOBQUEUE={"MAX_PAYLOAD_BYTES": MAX_PAGE_BYTES})  # values over 1 MiB
def test_page_stops_before_4_mib_of_values():
    big = "x" * (MAX_PAGE_BYTES // 3)  # three fill a page but for the quotes
    for i in range(5):
        draft.add(big, id=f"big:{i}")
    sizes = []
    page = draft.list(prefix="big:")
    while True:
        sizes.append(len(page.jobs))
        if page.next is None:
            break
        page = draft.list(prefix="big:", after=page.next)
    assert sizes == [2, 2, 1]
    assert draft.list().jobs and draft.list(limit=3).next is not None


@pytest.mark.django_db
def test_default_page_is_100_jobs():
    _bulk_jobs(QUEUE, "ids.draft", [f"d:{i}" for i in range(150)])
    page = draft.list()
    assert isinstance(page, Page) and len(page.jobs) == 100 and page.next is not None
