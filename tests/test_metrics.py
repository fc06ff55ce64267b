"""The Prometheus endpoint (django_jobqueue.metrics)."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from prometheus_client.parser import text_string_to_metric_families

from django_jobqueue.models import JobStatus
from django_jobqueue.store import pauses
from django_jobqueue.store.workerstats import StatsBuffer, register_worker
from tests.maintenance_helpers import make_job, make_jobs

pytestmark = pytest.mark.django_db

TOKEN = "scrape-me-please"  # noqa: S105


def samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


@override_settings(JOBQUEUE={"METRICS_TOKEN": TOKEN})
def test_metrics__export_depth_outcomes_histograms_workers_and_pauses():
    pauses.clear_cache()
    make_jobs(3, queue="mail")
    make_job(queue="mail", status=JobStatus.MAX_RETRY)
    make_job(queue="mail", secure=True, payload={"card": "SECRET-CARD"})
    pauses.pause_queue("default", "mail")
    register_worker("default", "h:1")
    buffer = StatsBuffer()
    buffer.record("mail", "mail.send", "done", 5)
    buffer.record("mail", "mail.send", "done", 2_000)
    buffer.record("mail", "mail.send", "failed", 50)
    buffer.flush("default")
    response = Client().get("/metrics/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    body = response.content.decode()
    assert "SECRET" not in body
    got = samples(body)
    assert got[("jobqueue_jobs", (("queue", "mail"), ("state", "waiting")))] == 4
    assert got[("jobqueue_jobs", (("queue", "mail"), ("state", "dead")))] == 1
    assert got[("jobqueue_queue_paused", (("queue", "mail"),))] == 1
    assert got[("jobqueue_live_workers", ())] == 1
    labels = (("job_type", "mail.send"), ("outcome", "done"), ("queue", "mail"))
    assert got[("jobqueue_job_outcomes_total", labels)] == 2
    hist = (("job_type", "mail.send"), ("queue", "mail"))
    assert got[("jobqueue_job_duration_seconds_count", hist)] == 3
    assert got[("jobqueue_job_duration_seconds_bucket", (*hist[:1], ("le", "0.01"), hist[1]))] == 1
    assert got[("jobqueue_job_duration_seconds_sum", hist)] == pytest.approx(2.055)
    pauses.clear_cache()


@override_settings(JOBQUEUE={"METRICS_TOKEN": TOKEN})
def test_metrics__need_the_token_or_staff():
    assert Client().get("/metrics/").status_code == 403
    assert Client().get("/metrics/", headers={"Authorization": "Bearer wrong"}).status_code == 403
    client = Client()
    client.force_login(User.objects.create_user("plain"))
    assert client.get("/metrics/").status_code == 403
    client.force_login(User.objects.create_user("ops", is_staff=True))
    assert client.get("/metrics/").status_code == 200


def test_stat_totals__sums_closed_hours_once_per_refresh_and_open_hours_each_call(monkeypatch):
    from django_jobqueue import overview

    now = datetime(2026, 5, 4, 12, 30, tzinfo=UTC)
    at = now.timestamp()

    def flush(seconds_ago: float, outcome: str, count: int = 1) -> None:
        buffer = StatsBuffer(clock=lambda: at - seconds_ago)
        buffer.record("mail", "mail.send", outcome, 40, count=count)
        buffer.flush("default")

    flush(3 * 3600, "done", 5)  # a closed hour (before 11:00)
    flush(10 * 60, "done", 2)  # the open hours (11:00 on)
    totals = overview.stat_totals("default", now=now)
    assert totals[("mail", "mail.send")]["done"] == 7
    assert totals[("mail", "mail.send")]["le_100"] == 7
    flush(3 * 3600, "failed")  # a late write into a closed hour: seen at the next refresh
    flush(60, "done")  # the open hours: seen at once
    with CaptureQueriesContext(connection) as queries:
        totals = overview.stat_totals("default", now=now)
    assert len(queries) == 1  # the open hours only
    mail = totals[("mail", "mail.send")]
    assert (mail["done"], mail["failed"]) == (8, 0)
    later = time.monotonic() + overview.TOTALS_REFRESH_S + 1
    monkeypatch.setattr(overview.time, "monotonic", lambda: later)
    with CaptureQueriesContext(connection) as queries:
        mail = overview.stat_totals("default", now=now)[("mail", "mail.send")]
    assert len(queries) == 2  # refreshed: the closed hours again, and the open ones
    assert (mail["done"], mail["failed"]) == (8, 1)
    assert set(mail) == set(overview.STAT_COUNTERS)
