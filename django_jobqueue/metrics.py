"""The Prometheus endpoint (docs/metrics.md: every series, its labels and a dashboard).

Mount it with ``path("metrics/", include("django_jobqueue.metrics"))``.

A custom collector reads the database at scrape time, so any number of worker
processes on any number of hosts are scraped through one endpoint: queue depth by
state, the oldest waiting age and pauses per queue from the job table (over its
indexes, as the console's overview), live workers from the registry, and the
counters and histograms (outcomes, run time, pickup latency) by queue and job type
from :class:`~django_jobqueue.models.JobTotal`, cumulative totals kept in the
database that pruning never lowers, so a counter only goes up. Every worker's jobs
reach them through storage: ``runworkers`` and gateway workers in any language.
Labels are queue, job type, state, outcome and worker kind names only, never a
payload.

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
from .models import DURATION_BUCKETS_MS, PICKUP_BUCKETS_MS
from .overview import jobs_database, overview, stat_totals
from .store.jobstats import BUCKET_FIELDS, OUTCOMES, PICKUP_FIELDS
from .store.limits import limit_rows
from .store.workerstats import live_workers

__all__ = ["WORKER_KINDS", "JobQueueCollector", "metrics_view", "urlpatterns"]


#: Worker kinds always exported (0 when none is live), so a dashboard sees each.
WORKER_KINDS = ("runworkers", "gateway")


def _buckets(
    stat: dict[str, int], bounds_ms: tuple[int, ...], fields: tuple[str, ...]
) -> list[tuple[str, float]]:
    """Cumulative (``le`` in seconds, count) pairs of one histogram's bucket columns."""
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound, name in zip((*bounds_ms, None), fields, strict=True):
        cumulative += stat[name]
        buckets.append(("+Inf" if bound is None else str(bound / 1000), cumulative))
    return buckets


class JobQueueCollector(Collector):
    """Collect the job queue's metrics from the database ``alias`` at each scrape."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def collect(self) -> Iterator[Any]:
        """Yield the metric families; docs/metrics.md says what each holds."""
        yield from self._queues()
        yield self._workers()
        yield from self._totals()
        yield from self._limits()

    def _queues(self) -> Iterator[Any]:
        depth = GaugeMetricFamily(
            "jobqueue_jobs",
            "Jobs now by queue and state (waiting: due now; scheduled: run_at ahead).",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "jobqueue_oldest_waiting_seconds",
            "Seconds the oldest due waiting job has waited since its run_at (0: none).",
            labels=["queue"],
        )
        paused = GaugeMetricFamily(
            "jobqueue_queue_paused", "1 when the queue is paused.", labels=["queue"]
        )
        for row in overview(self.alias):
            for state in ("waiting", "scheduled", "running", "retrying", "dead"):
                depth.add_metric([row.queue, state], getattr(row, state))
            oldest.add_metric([row.queue], row.oldest_waiting_s or 0.0)
            paused.add_metric([row.queue], 1.0 if row.paused else 0.0)
        yield depth
        yield oldest
        yield paused

    def _workers(self) -> GaugeMetricFamily:
        workers = GaugeMetricFamily(
            "jobqueue_live_workers",
            "Worker processes seen within three heartbeats, by kind.",
            labels=["kind"],
        )
        kinds = dict.fromkeys(WORKER_KINDS, 0)
        for worker in live_workers(self.alias):
            kinds[worker.kind] = kinds.get(worker.kind, 0) + 1
        for kind, number in sorted(kinds.items()):
            workers.add_metric([kind], number)
        return workers

    def _totals(self) -> Iterator[Any]:
        outcomes = CounterMetricFamily(
            "jobqueue_job_outcomes",
            "Attempts by outcome (done, retried, failed: a dead letter) and enqueues "
            "turned away (deduplicated), since install.",
            labels=["queue", "job_type", "outcome"],
        )
        durations = HistogramMetricFamily(
            "jobqueue_job_duration_seconds",
            "Run time of attempts (done, retried, failed) since install.",
            labels=["queue", "job_type"],
        )
        pickups = HistogramMetricFamily(
            "jobqueue_job_pickup_seconds",
            "Pickup latency of claims: from a job's run_at (enqueue or due time) to its start.",
            labels=["queue", "job_type"],
        )
        for (queue, job_type), stat in sorted(stat_totals(self.alias).items()):
            labels = [queue, job_type]
            for outcome in OUTCOMES:
                outcomes.add_metric([*labels, outcome], stat[outcome])
            durations.add_metric(
                labels,
                _buckets(stat, DURATION_BUCKETS_MS, BUCKET_FIELDS),
                sum_value=stat["duration_ms_sum"] / 1000,
            )
            pickups.add_metric(
                labels,
                _buckets(stat, PICKUP_BUCKETS_MS, PICKUP_FIELDS),
                sum_value=stat["pickup_ms_sum"] / 1000,
            )
        yield outcomes
        yield durations
        yield pickups

    def _limits(self) -> Iterator[Any]:
        in_flight = GaugeMetricFamily(
            "jobqueue_limit_in_flight",
            "Jobs processing now under a flow-control limit (docs/limits.md), by target.",
            labels=["target"],
        )
        concurrency = GaugeMetricFamily(
            "jobqueue_limit_concurrency",
            "The concurrency of a limit in force (per key when partitioned), by target.",
            labels=["target"],
        )
        rate = GaugeMetricFamily(
            "jobqueue_limit_rate_per_second",
            "The starts per second a limit in force allows (per key when partitioned).",
            labels=["target"],
        )
        waiting = GaugeMetricFamily(
            "jobqueue_limit_waiting",
            "Due jobs of a limited target: throttled by it, or waiting for a worker.",
            labels=["target"],
        )
        for row in limit_rows(self.alias):
            effective = row["effective"]
            in_flight.add_metric([row["target"]], row["in_flight"])
            waiting.add_metric([row["target"]], row["waiting"])
            if "concurrency" in effective:
                concurrency.add_metric([row["target"]], effective["concurrency"])
            if "rate" in effective:
                count, _sep, unit = str(effective["rate"]).partition("/")
                rate.add_metric([row["target"]], int(count) / {"s": 1, "m": 60, "h": 3600}[unit])
        yield in_flight
        yield concurrency
        yield rate
        yield waiting


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
