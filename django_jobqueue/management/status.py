"""``manage.py jobqueue status``: what each queue holds now and what finished lately.

One row per queue that has a job, statistics in the last hour, a pause or a
``JOBQUEUE["QUEUES"]`` entry (the console overview's queues, so a queue whose jobs
are all done, or pruned, is still reported). The finished work comes from the job
statistics every worker reports through storage (docs/metrics.md): the last hour,
as the console's overview shows it, and the totals since install, as the
Prometheus counters export them.
"""

from __future__ import annotations

from typing import Any

from django_jobqueue import maintenance
from django_jobqueue.models import JobStatus
from django_jobqueue.overview import QueueRow, overview, stat_totals
from django_jobqueue.store import states

__all__ = ["STATS_COLUMNS", "queue_report", "table_cells"]

#: The finished-work columns of the text table, over the last hour.
STATS_COLUMNS = ("done_1h", "failed_attempts_1h", "dead_letters_1h")


def queue_report(using: str, queues: list[str] | None) -> list[dict[str, Any]]:
    """Return one JSON-ready dict per queue, by name.

    Parameters
    ----------
    using
        Database alias of the jobs.
    queues
        Queue names to report; None: every known queue (see the module).

    Returns
    -------
    list of dict
        :meth:`maintenance.QueueStatus.as_dict` (``counts`` by stored status,
        ``states`` by state word, ``oldest_waiting_s``, ``busy_workers``) plus
        ``paused``, ``last_hour`` (``done``, ``failed_attempts``: every failed
        attempt, ``dead_letters``: those that failed for good) and ``totals``
        (the same since install, and ``deduplicated``).
    """
    glance = {row.queue: row for row in overview(using)}
    rows = {row.queue: row for row in maintenance.queue_status(using, queues=queues)}
    names = sorted(set(rows) | set(glance)) if queues is None else sorted(set(queues))
    totals: dict[str, dict[str, int]] = {}
    for (queue, _job_type), stat in stat_totals(using).items():
        into = totals.setdefault(queue, dict.fromkeys(("done", "retried", "failed", "dup"), 0))
        into["done"] += stat["done"]
        into["retried"] += stat["retried"]
        into["failed"] += stat["failed"]
        into["dup"] += stat["deduplicated"]
    report = []
    for name in names:
        row = rows.get(name) or maintenance.QueueStatus(
            queue=name,
            counts=dict.fromkeys(JobStatus.values, 0),
            states=dict.fromkeys(states.STATES, 0),
        )
        seen = glance.get(name) or QueueRow(queue=name)
        total = totals.get(name, dict.fromkeys(("done", "retried", "failed", "dup"), 0))
        report.append(
            {
                **row.as_dict(),
                "paused": seen.paused,
                "last_hour": {
                    "done": seen.done_last_hour,
                    "failed_attempts": seen.failed_attempts_last_hour,
                    "dead_letters": seen.dead_letters_last_hour,
                },
                "totals": {
                    "done": total["done"],
                    "failed_attempts": total["retried"] + total["failed"],
                    "dead_letters": total["failed"],
                    "deduplicated": total["dup"],
                },
            }
        )
    return report


def table_cells(entry: dict[str, Any]) -> list[str]:
    """Return the :data:`STATS_COLUMNS` cells of one :func:`queue_report` entry."""
    hour = entry["last_hour"]
    return [str(hour["done"]), str(hour["failed_attempts"]), str(hour["dead_letters"])]
