"""The tables of job statistics (docs/metrics.md): JobStat and JobTotal.

:class:`JobStat` holds per-minute counters of one (queue, job type), pruned after
``STATS_RETENTION``; :class:`JobTotal` the same counters summed since install, never
pruned, which the Prometheus endpoint exports. Both share the columns of
:class:`StatCounters`: outcomes, a run-time histogram (:data:`DURATION_BUCKETS_MS`)
and a pickup-latency histogram (:data:`PICKUP_BUCKETS_MS`). They are written only by
the buffered upsert of :mod:`django_jobqueue.store.statbuffer`.

This module is imported by :mod:`django_jobqueue.models`, where Django finds them.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = [
    "DURATION_BUCKETS_MS",
    "JobStat",
    "JobTotal",
    "PICKUP_BUCKETS_MS",
    "StatCounters",
]


#: Upper bounds (ms, inclusive) of :class:`JobStat`'s duration buckets, one column
#: each (``le_<bound>``), then ``le_inf`` for the rest. Counts are per bucket, not
#: cumulative; Prometheus' cumulative ``le`` series are summed at scrape time.
DURATION_BUCKETS_MS = (10, 100, 1_000, 10_000, 60_000, 300_000)
#: Upper bounds (ms, inclusive) of the pickup-latency buckets (``pickup_le_<bound>``,
#: then ``pickup_le_inf``): from a job's ``run_at`` (its enqueue, or the time it
#: became due) to its claim, both by the database clock.
PICKUP_BUCKETS_MS = (100, 1_000, 10_000, 60_000, 300_000, 3_600_000)


class StatCounters(models.Model):
    """The counters of :class:`JobStat` (per minute) and :class:`JobTotal` (since
    install): outcomes, a run-time histogram and a pickup-latency histogram."""

    done = models.PositiveBigIntegerField(_("done"), default=0)
    #: Attempts that ended as a dead letter (``error`` or ``max_retry``).
    failed = models.PositiveBigIntegerField(_("failed"), default=0)
    #: Attempts that failed with another attempt to come (``retry``).
    retried = models.PositiveBigIntegerField(_("retried"), default=0)
    #: Enqueues turned away by an id or a unique key held by another job.
    deduplicated = models.PositiveBigIntegerField(_("deduplicated"), default=0)
    duration_ms_sum = models.PositiveBigIntegerField(_("duration sum (ms)"), default=0)
    le_10 = models.PositiveBigIntegerField(default=0)
    le_100 = models.PositiveBigIntegerField(default=0)
    le_1000 = models.PositiveBigIntegerField(default=0)
    le_10000 = models.PositiveBigIntegerField(default=0)
    le_60000 = models.PositiveBigIntegerField(default=0)
    le_300000 = models.PositiveBigIntegerField(default=0)
    le_inf = models.PositiveBigIntegerField(default=0)
    pickup_ms_sum = models.PositiveBigIntegerField(_("pickup latency sum (ms)"), default=0)
    pickup_le_100 = models.PositiveBigIntegerField(default=0)
    pickup_le_1000 = models.PositiveBigIntegerField(default=0)
    pickup_le_10000 = models.PositiveBigIntegerField(default=0)
    pickup_le_60000 = models.PositiveBigIntegerField(default=0)
    pickup_le_300000 = models.PositiveBigIntegerField(default=0)
    pickup_le_3600000 = models.PositiveBigIntegerField(default=0)
    pickup_le_inf = models.PositiveBigIntegerField(default=0)

    class Meta:
        abstract = True


class JobStat(StatCounters):
    """Per-minute outcome counters of one (queue, job type): statistics that
    survive pruning.

    Written in batches by :class:`django_jobqueue.store.statbuffer.StatsBuffer` (one
    upsert per flush that adds to the counters), read by the console's charts and
    overview, ``jobqueue status`` and the Pro dedupe audit. ``minute`` is the UTC
    minute the outcomes happened in; rows older than ``STATS_RETENTION`` are pruned.
    """

    minute = models.DateTimeField(_("minute"))
    queue = models.CharField(_("queue"), max_length=100)
    job_type = models.CharField(_("job type"), max_length=200)

    class Meta:
        verbose_name = _("job statistic")
        verbose_name_plural = _("job statistics")
        constraints = [
            models.UniqueConstraint(fields=["minute", "queue", "job_type"], name="jq_stat_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.queue} {self.job_type}"


class JobTotal(StatCounters):
    """Cumulative counters of one (queue, job type) since it was first counted.

    Written by the same upsert as :class:`JobStat` (same transaction, same
    increments) and never pruned or decreased: the Prometheus counters
    (docs/metrics.md). One row per (queue, job type), so a scrape reads a few rows.
    """

    queue = models.CharField(_("queue"), max_length=100)
    job_type = models.CharField(_("job type"), max_length=200)

    class Meta:
        verbose_name = _("job total")
        verbose_name_plural = _("job totals")
        constraints = [
            models.UniqueConstraint(fields=["queue", "job_type"], name="jq_total_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} {self.job_type}"
