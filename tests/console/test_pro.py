"""The console's Pro routes: 404 without a valid licence, 200 with one.

The split is docs/design.md#core-and-pro.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store.workerstats import StatsBuffer
from tests.maintenance_helpers import make_job, make_jobs

pytestmark = pytest.mark.django_db

PRO_PAGES = ("locks", "dedupe", "bulk")


def url(name, *args):
    return reverse(f"django_jobqueue_console:{name}", args=args)


@pytest.mark.parametrize("page", PRO_PAGES)
def test_pro_pages__404_without_a_licence(clients, page):
    assert clients["superuser"].get(url(page)).status_code == 404
    assert b"Core edition" in clients["superuser"].get(url("overview")).content


@pytest.mark.parametrize("page", PRO_PAGES)
@pytest.mark.parametrize(
    ("role", "status"), [("anonymous", 302), ("nonstaff", 403), ("staff", 200), ("superuser", 200)]
)
def test_pro_pages__served_with_a_licence(clients, pro, page, role, status):
    assert clients[role].get(url(page)).status_code == status


def test_locks__lists_holders_and_releases_one(clients, pro):
    job = make_job(unique_key="report:7", unique_mode="until_executed")
    body = clients["staff"].get(url("locks")).content.decode()
    assert "report:7" in body and "until_executed" in body
    assert clients["staff"].post(url("release_lock", job.jid)).status_code == 403
    assert clients["permitted"].post(url("release_lock", job.jid)).status_code == 302
    assert Job.objects.get(pk=job.pk).unique_key_hash is None
    assert clients["permitted"].post(url("release_lock", job.jid)).status_code == 404


def test_release_lock__404_without_a_licence(clients):
    job = make_job(unique_key="k")
    assert clients["superuser"].post(url("release_lock", job.jid)).status_code == 404
    assert Job.objects.get(pk=job.pk).unique_key_hash is not None


def test_dedupe__counts_turned_away_enqueues(clients, pro):
    buffer = StatsBuffer()
    for _ in range(4):
        buffer.record("mail", "mail.send", "deduplicated")
    buffer.flush("default")
    body = clients["staff"].get(url("dedupe")).content.decode()
    assert "mail.send" in body and '<td class="num">4</td>' in body


def test_bulk__counts_every_match_then_runs(clients, pro, monkeypatch):
    from django_jobqueue.console import actions

    monkeypatch.setattr(actions, "BATCH_SIZE", 7)
    make_jobs(60, status=JobStatus.ERROR, queue="big")
    make_jobs(2, status=JobStatus.ERROR, queue="other")
    client = clients["permitted"]
    response = client.post(url("bulk"), {"queue": "big", "action": "retry"})
    assert b"Retry 60 jobs" in response.content
    response = client.post(url("bulk"), {"queue": "big", "action": "retry", "confirm": "yes"})
    assert response.status_code == 302
    assert Job.objects.filter(queue="big", status=JobStatus.INIT).count() == 60
    assert Job.objects.filter(queue="other", status=JobStatus.ERROR).count() == 2
    assert (
        clients["staff"].post(url("bulk"), {"queue": "big", "action": "delete"}).status_code == 403
    )
