"""The Prometheus endpoint (django_jobqueue.metrics)."""

from __future__ import annotations

import json
import re
import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from prometheus_client.parser import text_string_to_metric_families

from django_jobqueue import storage
from django_jobqueue.core.dbclock import Now
from django_jobqueue.models import Job, JobStat, JobStatus
from django_jobqueue.overview import overview
from django_jobqueue.store import pauses
from django_jobqueue.store.jobstats import StatsBuffer, process_stats, prune_stats
from django_jobqueue.store.workerstats import register_worker
from tests.maintenance_helpers import make_job, make_jobs
from tests.workers_helpers import ROOT

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
    assert got[("jobqueue_live_workers", (("kind", "runworkers"),))] == 1
    assert got[("jobqueue_live_workers", (("kind", "gateway"),))] == 0
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


def scrape() -> str:
    response = Client().get("/metrics/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 200
    return response.content.decode()


def documented_series() -> dict[str, tuple[str, set[str]]]:
    """docs/metrics.md's table of series: {name: (type, labels)}."""
    text = (ROOT / "docs" / "metrics.md").read_text()
    rows = re.findall(r"^\| `(jobqueue_\w+)` \| (\w+) \| ([^|]*) \|", text, re.MULTILINE)
    return {name: (kind, set(re.findall(r"`(\w+)`", labels))) for name, kind, labels in rows}


def counter_samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples that must never go down: counters and histograms."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        if family.type in ("counter", "histogram")
        for s in family.samples
        if not s.name.endswith("_created")
    }


@override_settings(JOBQUEUE={"METRICS_TOKEN": TOKEN})
def test_metrics__every_series_is_in_the_docs_table_with_its_type_and_labels():
    make_jobs(2, queue="mail")
    register_worker("default", "h:1")
    # A flow-control limit, so the limit series have samples too (docs/limits.md).
    from django_jobqueue.store import limits

    limits.set_limit("default", "queue:mail", {"concurrency": 5, "rate": "10/s"})
    buffer = StatsBuffer()
    buffer.record("mail", "mail.send", "done", 5)
    buffer.record_pickup("mail", "mail.send", 250)
    buffer.flush("default")
    families = {f.name: f for f in text_string_to_metric_families(scrape())}
    exported = {
        (name + "_total" if family.type == "counter" else name): family
        for name, family in families.items()
    }
    documented = documented_series()
    assert set(exported) == set(documented)
    for name, family in exported.items():
        kind, labels = documented[name]
        assert family.type == kind, name
        seen = {key for sample in family.samples for key in sample.labels if key != "le"}
        assert seen == labels, name


@override_settings(JOBQUEUE={"METRICS_TOKEN": TOKEN, "STATS_RETENTION": "1h"})
def test_prune_stats__never_lowers_a_counter():
    now = time.time()
    old = StatsBuffer(clock=lambda: now - 3 * 3600)  # past the retention: pruned
    for _ in range(5):
        old.record("mail", "mail.send", "done", 40)
    old.record("mail", "mail.send", "failed", 900)
    old.record_pickup("mail", "mail.send", 2_000)
    old.flush("default")
    recent = StatsBuffer(clock=lambda: now)
    recent.record("mail", "mail.send", "done", 40)
    recent.record("mail", "mail.send", "retried", 70)
    recent.flush("default")
    before = counter_samples(scrape())
    assert prune_stats("default") == 1
    assert JobStat.objects.count() == 1
    after = counter_samples(scrape())
    assert set(after) == set(before)
    lowered = {key: (before[key], after[key]) for key in before if after[key] < before[key]}
    assert lowered == {}
    labels = (("job_type", "mail.send"), ("outcome", "done"), ("queue", "mail"))
    assert after[("jobqueue_job_outcomes_total", labels)] == 6  # since install
    row = next(r for r in overview("default") if r.queue == "mail")
    assert row.done_last_hour == 1  # the window, pruned or not
    assert (row.failed_attempts_last_hour, row.dead_letters_last_hour) == (1, 0)
    recent.record("mail", "mail.send", "done", 40)
    recent.flush("default")
    assert (
        after[("jobqueue_job_outcomes_total", labels)] + 1
        == counter_samples(scrape())[("jobqueue_job_outcomes_total", labels)]
    )


@pytest.mark.django_db(transaction=True)  # the process's counts are written outside one
@override_settings(JOBQUEUE={"METRICS_TOKEN": TOKEN})
def test_metrics__pickup_latency_and_outcomes_of_claimed_jobs(monkeypatch):
    """Claims and stored outcomes reach the histograms through storage, whoever the worker."""
    monkeypatch.setattr(process_stats, "flush_timer", False)  # written below, not by a timer
    waited, fresh = make_job(queue="mail", job_type="maint.noop"), make_job(queue="mail")
    Job.objects.filter(pk=waited.pk).update(run_at=Now() - timedelta(seconds=30))
    claimed = storage.claim("default", owner="test:1", limit=2, queues=["mail"])
    assert {job.pk for job in claimed} == {waited.pk, fresh.pk}
    by_pk = {job.pk: job for job in claimed}
    assert storage.complete(by_pk[waited.pk], {"ok": 1}, run_ms=5)
    assert storage.fail(by_pk[fresh.pk], None, message="boom", run_ms=20_000) == JobStatus.RETRY
    assert process_stats.flush("default") == 1
    got = samples(scrape())
    hist = (("job_type", "maint.noop"), ("queue", "mail"))
    assert got[("jobqueue_job_pickup_seconds_count", hist)] == 2
    assert got[("jobqueue_job_pickup_seconds_bucket", (hist[0], ("le", "10.0"), hist[1]))] == 1
    assert got[("jobqueue_job_pickup_seconds_bucket", (hist[0], ("le", "60.0"), hist[1]))] == 2
    assert got[("jobqueue_job_pickup_seconds_sum", hist)] >= 30
    assert got[("jobqueue_job_duration_seconds_bucket", (hist[0], ("le", "0.01"), hist[1]))] == 1
    assert got[("jobqueue_job_duration_seconds_count", hist)] == 2
    for outcome, number in (("done", 1), ("retried", 1), ("failed", 0)):
        labels = (hist[0], ("outcome", outcome), hist[1])
        assert got[("jobqueue_job_outcomes_total", labels)] == number


@pytest.mark.django_db(databases=[])
def test_grafana_dashboard__valid_json_whose_panels_query_documented_series():
    dashboard = json.loads((ROOT / "docs" / "grafana-dashboard.json").read_text())
    documented = set(documented_series())
    suffixes = ("_bucket", "_count", "_sum")
    queried: set[str] = set()
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            names = set(re.findall(r"\bjobqueue_\w+", target["expr"]))
            assert names, target["expr"]
            for name in names:
                base = next((name[: -len(s)] for s in suffixes if name.endswith(s)), name)
                assert name in documented or base in documented, name
                queried.add(base)
    assert queried == documented  # a panel on every series
