"""A running job's progress (docs/console.md "Progress"): ``ctx.progress`` costs no
statement, the heartbeat stores the latest report at most once a second per job; the
gateway's heartbeat stores a ``progress`` member (422 on a bad one); the console's
progress view answers it as JSON."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from django_jobqueue.core.exceptions import InvalidRequest
from django_jobqueue.models import Job
from django_jobqueue.store import progress as progress_module
from django_jobqueue.worker.context import JobContext
from tests.maintenance_helpers import running

pytestmark = pytest.mark.django_db


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", fake)
    return fake


def stored(job: Job) -> Any:
    return Job.objects.get(pk=job.pk).progress


def test_reports__cost_no_statement_and_are_stored_by_the_heartbeat_once_a_second(
    clock: Clock, django_assert_num_queries: Any
):
    job = running()
    ctx = JobContext(job)
    with django_assert_num_queries(0):
        for done in range(1, 101):
            ctx.progress(done, 1000, message=f"row {done}")
    assert stored(job) is None

    assert ctx.heartbeat()
    assert stored(job) == {"done": 100, "total": 1000, "message": "row 100"}

    ctx.progress(200, 1000)
    clock.now += 0.5
    assert ctx.heartbeat()  # the lease is extended, the report waits (< 1 s)
    assert stored(job)["done"] == 100
    clock.now += 0.5
    assert ctx.heartbeat()
    assert stored(job) == {"done": 200, "total": 1000, "message": None}


def test_a_failed_heartbeat__keeps_the_report_for_the_next(clock: Clock):
    slot = progress_module.ProgressSlot()
    slot.put({"done": 1, "total": 2, "message": None})
    report = slot.take()
    assert report and slot.take() is None
    slot.put_back(report)
    assert slot.take() == report


@pytest.mark.parametrize(
    ("done", "total", "message"),
    [
        (-1, 10, None),
        (11, 10, None),
        (1.5, 10, None),
        (True, 10, None),
        (1, 10, 3),
        (1, 10, "a\x00b"),
        (1, 10, "\ud800"),
    ],
)
def test_bad_reports__are_a_typed_error(done: Any, total: Any, message: Any):
    ctx = JobContext(running())
    with pytest.raises(InvalidRequest):
        ctx.progress(done, total, message)


def test_long_message__is_cut():
    assert progress_module.progress_value(1, 0, "x" * 500)["message"] == "x" * 200


def test_console_progress_view__answers_running_jobs_as_json():
    job = running(progress={"done": 4, "total": 8, "message": None})
    staff = User.objects.create_superuser("boss", "b@example.com", "pw")
    client = Client()
    client.force_login(staff)
    answer = client.get("/console/progress/", {"jid": [job.jid, "nope"]}).json()
    assert answer == {
        "jobs": {
            job.jid: {
                "status": "processing",
                "state": answer["jobs"][job.jid]["state"],
                "progress": {"done": 4, "total": 8, "message": None},
            }
        }
    }
    page = client.get(f"/console/jobs/{job.jid}/").content.decode()
    assert f'data-jq-progress="{job.jid}"' in page and 'value="4"' in page
    assert Client().get("/console/progress/", {"jid": job.jid}).status_code in (302, 403)
