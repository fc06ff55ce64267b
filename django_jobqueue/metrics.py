"""The Prometheus endpoint.

Mount it with ``path("metrics/", include("django_jobqueue.metrics"))``.

A custom collector reads the database at scrape time, so the numbers are right
with any number of ``runworkers`` processes: queue depth by state and the oldest
waiting age per queue from the job table (over its indexes, as the console's
overview), outcome counters and duration histograms by queue and job type from
:class:`~django_jobqueue.models.JobStat` (the rows still kept: totals over
``STATS_RETENTION``; :func:`~django_jobqueue.overview.stat_totals` caches the closed
hours' sums for a few minutes per process), live workers from the registry, paused
queues. Labels are queue and job type names only, never a payload.

Access: a bearer token (``JOBQUEUE["METRICS_TOKEN"]``), or a signed-in staff user.
Needs the ``metrics`` extra (prometheus-client).
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.urls import path

try:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
except ImportError as exc:  # the URL is included but the extra is not installed
    raise ImportError(
        'django_jobqueue.metrics needs prometheus-client: pip install "django-jobqueue[metrics]"'
    ) from exc
from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from .core.conf import get_config
from .models import DURATION_BUCKETS_MS
from .overview import jobs_database, overview, stat_totals
from .store.workerstats import BUCKET_FIELDS, OUTCOMES, live_workers

__all__ = ["JobQueueCollector", "metrics_view", "urlpatterns"]


class JobQueueCollector(Collector):
    """Collect the job queue's metrics from the database ``alias`` at each scrape."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def collect(self) -> Iterator[Any]:
        """Yield the metric families; see the module docstring for what each holds."""
        queues = overview(self.alias)
        depth = GaugeMetricFamily(
            "jobqueue_jobs", "Jobs by queue and state.", labels=["queue", "state"]
        )
        oldest = GaugeMetricFamily(
            "jobqueue_oldest_waiting_seconds",
            "Age of the oldest due waiting job.",
            labels=["queue"],
        )
        paused = GaugeMetricFamily(
            "jobqueue_queue_paused", "1 when the queue is paused.", labels=["queue"]
        )
        for row in queues:
            for state in ("waiting", "scheduled", "running", "retrying", "dead"):
                depth.add_metric([row.queue, state], getattr(row, state))
            oldest.add_metric([row.queue], row.oldest_waiting_s or 0.0)
            paused.add_metric([row.queue], 1.0 if row.paused else 0.0)
        yield depth
        yield oldest
        yield paused
        yield GaugeMetricFamily(
            "jobqueue_live_workers",
            "Workers seen within three heartbeats.",
            value=len(live_workers(self.alias)),
        )
        outcomes = CounterMetricFamily(
            "jobqueue_job_outcomes",
            "Job outcomes over the kept stats.",
            labels=["queue", "job_type", "outcome"],
        )
        durations = HistogramMetricFamily(
            "jobqueue_job_duration_seconds", "Run time of attempts.", labels=["queue", "job_type"]
        )
        for (queue, job_type), stat in sorted(stat_totals(self.alias).items()):
            labels = [queue, job_type]
            for outcome in OUTCOMES:
                outcomes.add_metric([*labels, outcome], stat[outcome])
            cumulative = 0
            buckets = []
            for bound, name in zip((*DURATION_BUCKETS_MS, None), BUCKET_FIELDS, strict=True):
                cumulative += stat[name]
                buckets.append(("+Inf" if bound is None else str(bound / 1000), cumulative))
            durations.add_metric(labels, buckets, sum_value=stat["duration_ms_sum"] / 1000)
        yield outcomes
        yield durations


def _allowed(request: HttpRequest) -> bool:
    token = get_config().METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if token and header.startswith("Bearer "):
        return hmac.compare_digest(header[len("Bearer ") :].encode(), token.encode())
    user = request.user
    return bool(user.is_authenticated and user.is_active and user.is_staff)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Answer a scrape in the Prometheus text format; 403 without the token or staff."""
    if not _allowed(request):
        return HttpResponse(
            "Forbidden: send the metrics token or sign in as staff.\n",
            status=403,
            content_type="text/plain",
        )
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JobQueueCollector(jobs_database()))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


urlpatterns = [path("", metrics_view, name="jobqueue_metrics")]
