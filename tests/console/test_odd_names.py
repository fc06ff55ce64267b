"""Every console and admin page with odd stored queue, job type and schedule names.

Names with ``/``, ``%``, ``?``, ``#``, spaces, unicode and the longest lengths,
stored straight in the tables (rows written before the queue-name rule of
docs/gateway.md "Queue names" refused some of them), walked as a superuser: no page
answers 5xx, and the pause form of each queue the overview shows pauses that queue.
"""

from __future__ import annotations

import html
import re
from urllib.parse import quote, unquote

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_jobqueue.models import ApiToken, Job, JobStatus, QueuePause, ScheduleJob
from django_jobqueue.store import pauses
from django_jobqueue.store.workerstats import register_worker
from tests.maintenance_helpers import make_job

pytestmark = pytest.mark.django_db

ODD = [
    "reports/daily",
    "/leading",
    "trailing/",
    "a//b",
    "100%",
    "%2F",
    "what?",
    "#hash",
    "with spaces ",
    " ",
    "ünïcødé ✓ 队列",
    "..",
    "q" * 100,
]


def _console(name, *args):
    return reverse(f"django_jobqueue_console:{name}", args=args)


@pytest.fixture
def root():
    client = Client()
    client.force_login(User.objects.create_superuser("root", password=None))
    return client


@pytest.fixture
def odd_rows():
    jobs = []
    for index, name in enumerate(ODD):
        jobs.append(make_job(queue=name, job_type=(name * 2)[:200], status=JobStatus.MAX_RETRY))
        jobs.append(make_job(queue=name, job_type="x" * 200, status=JobStatus.INIT))
        ScheduleJob.objects.create(
            name=(name * 2)[:200], queue=name, job_type="maint.noop", cron="0 3 * * *"
        )
        register_worker("default", f"{name}-{index}"[:200], queues=[name], job_types=[name])
    QueuePause.objects.create(queue=ODD[0], paused_by="x" * 200)
    pauses.clear_cache()
    return jobs


def _get(client, path, **params):
    response = client.get(path, params)
    assert response.status_code < 500, (path, params, response.status_code)
    return response


def test_console_pages_never_answer_5xx(root, odd_rows):
    for page in ("overview", "jobs", "workers", "schedules"):
        assert _get(root, _console(page)).status_code == 200
    for name in ODD:
        for params in ({"queue": name}, {"queue": name, "state": "dead"}, {"job_type": name}):
            assert _get(root, _console("jobs"), **params).status_code == 200
    for job in odd_rows:
        assert _get(root, _console("job", job.jid)).status_code == 200
    for page in ("locks", "dedupe", "bulk"):
        _get(root, _console(page))
        for name in ODD:
            _get(root, _console(page), queue=name)


def test_admin_pages_never_answer_5xx(root, odd_rows):
    for model in (Job, ScheduleJob, ApiToken):
        changelist = reverse(f"admin:django_jobqueue_{model._meta.model_name}_changelist")
        assert _get(root, changelist).status_code == 200
        for name in ODD:
            _get(root, changelist, q=name)
            _get(root, changelist, queue=name)
            _get(root, changelist, queue__exact=name)
    for job in odd_rows:
        assert (
            _get(root, reverse("admin:django_jobqueue_job_change", args=[job.pk])).status_code
            == 200
        )
    for plan in ScheduleJob.objects.all():
        url = reverse("admin:django_jobqueue_schedulejob_change", args=[plan.pk])
        assert _get(root, url).status_code == 200


def test_every_pause_form_of_the_overview_pauses_its_queue(root, odd_rows):
    page = _get(root, _console("overview")).content.decode()
    actions = [html.unescape(a) for a in re.findall(r'action="([^"]*/queues/[^"]*)"', page)]
    assert len(actions) == len(ODD), actions
    for action in actions:
        response = root.post(action)
        assert response.status_code == 302, (action, response.status_code)
    pauses.clear_cache()
    # The first was paused already: its form resumed it. Every other one is paused now.
    assert set(QueuePause.objects.values_list("queue", flat=True)) == set(ODD[1:])


def test_reversed_queue_urls_resolve_to_their_name(root):
    for name in ODD:
        url = _console("queue_action", name, "pause")
        assert quote(name, safe="/") in url or unquote(url).endswith(f"/{name}/pause/")
        assert root.post(url).status_code == 302
    assert set(QueuePause.objects.values_list("queue", flat=True)) == set(ODD)


def test_jobs_with_refused_names_stay_operable(root, odd_rows):
    for job in odd_rows:
        action = "retry" if job.status == JobStatus.MAX_RETRY else "cancel"
        response = root.post(_console("job_action", job.jid, action))
        assert response.status_code == 302, (job.queue, action)
        after = Job.objects.get(pk=job.pk).status
        assert after == (JobStatus.INIT if action == "retry" else JobStatus.CANCELLED), job.queue


@pytest.mark.parametrize(
    ("method", "path", "data"),
    [
        ("post", "/console/pause-queue/", {"queue": "\x00"}),
        ("post", "/console/queues/%00/pause/", {}),
        ("post", "/console/queues/%00/resume/", {}),
        ("post", "/console/jobs/%00/retry/", {}),
        ("post", "/console/jobs/%00/delete/", {}),
        ("get", "/console/jobs/%00/", {}),
        ("get", "/console/jobs/?queue=%00", {}),
    ],
)
def test_console__a_nul_character_is_a_400_never_a_500(root, method, path, data):
    # PostgreSQL text cannot hold NUL: such a name reached the database as a 500.
    response = getattr(root, method)(path, data)
    assert response.status_code == 400


@pytest.mark.parametrize(
    "pk", ["99999999999999999999999", str(2**63), "-99999999999999999999", "0"]
)
def test_selection__a_pk_no_job_can_have_ticks_nothing(root, pk):
    job = make_job(queue="q", status=JobStatus.MAX_RETRY)
    data = {"action": "retry", "pk": [pk], "confirm": "yes"}
    response = root.post(_console("selection"), data, follow=True)
    assert response.status_code == 200
    assert "Tick 1 to" in response.content.decode()
    assert Job.objects.get(pk=job.pk).status == JobStatus.MAX_RETRY
