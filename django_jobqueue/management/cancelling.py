"""``manage.py jobqueue cancel``: cancel waiting jobs, ask running ones to stop.

By jid (repeatable) or by queue (and job type); the work is
:func:`django_jobqueue.maintenance.cancel_jobs`, in audited batches
(:func:`django_jobqueue.operations.act_in_batches`, docs/console.md "Audit log").
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobqueue.management import filtering
from django_jobqueue.management.arguments import add_database, jobs_database_of, name
from django_jobqueue.models import Job
from django_jobqueue.operations import act_in_batches
from django_jobqueue.store.audit import cli_actor

__all__ = ["arguments", "cancel"]


def arguments(parser: CommandParser) -> None:
    """Add ``--jid`` (repeatable), ``--queue``, ``--type`` and ``--database``."""
    add_database(parser)
    parser.add_argument(
        "--jid", action="append", type=name, dest="jids", metavar="JID", help="Cancel this job."
    )
    parser.add_argument("--queue", type=name, help="Cancel the waiting and running jobs of it.")
    parser.add_argument(
        "--type", type=name, dest="job_type", help="With --queue: only jobs of this job type."
    )
    filtering.add_filter_argument(parser, "cancel")


def cancel(
    command: BaseCommand,
    *,
    database: str | None = None,
    jids: list[str] | None = None,
    queue: str | None = None,
    job_type: str | None = None,
    job_filter: str | None = None,
    **_: Any,
) -> None:
    """Cancel the chosen jobs; say how many were cancelled and how many asked to stop."""
    if job_filter is not None:
        if jids is not None or queue is not None or job_type is not None:
            raise CommandError("--filter says which jobs to cancel; give it alone.")
        filtering.act_on_filter(command, "cancel", job_filter, database=database)
        return
    if jids is None and queue is None:
        raise CommandError("Choose the jobs to cancel: give --jid or --queue.")
    if jids is not None and (queue is not None or job_type is not None):
        raise CommandError("Give --jid alone, or --queue (with --type), not both.")
    if job_type is not None and queue is None:
        raise CommandError("--type narrows --queue; give --queue too.")
    using = jobs_database_of(database)
    jobs = Job.objects.using(using).all()
    if jids is not None:
        found = set(jobs.filter(jid__in=jids).values_list("jid", flat=True))
        missing = [jid for jid in jids if jid not in found]
        if missing:
            raise CommandError(
                f"No job has jid {', '.join(missing)}; copy the jid from the console or the logs."
            )
        jobs = jobs.filter(jid__in=jids)
        target = f"job {jids[0]}" if len(jids) == 1 else f"{len(jids)} jobs by jid"
    else:
        jobs = jobs.filter(queue=queue)
        target = f"jobs of queue {queue}"
        if job_type is not None:
            jobs = jobs.filter(job_type=job_type)
            target += f", type {job_type}"
    counts = act_in_batches(jobs, "cancel", cli_actor(), target=target)
    cancelled, requested = counts.get("cancelled", 0), counts.get("requested", 0)
    command.stdout.write(
        f"Cancelled {cancelled} waiting job(s); asked the workers of {requested} running "
        "job(s) to stop."
    )
