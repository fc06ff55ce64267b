"""``manage.py jobqueue``: operators' subcommands (status, prune, retry, licence, schedules,
token).

The command only parses and wires: the work is in :mod:`django_jobqueue.maintenance`
(shared with the admin's actions) and :mod:`django_jobqueue.store.licence`.

Adding a subcommand is one function decorated with :func:`subcommand`; its
``arguments`` callable adds its options::

    def _schedules_arguments(parser: CommandParser) -> None:
        parser.add_argument("--name", type=_name, help="...")

    @subcommand("schedules", help="List the schedules.", arguments=_schedules_arguments)
    def _schedules(command: Command, *, name: str | None, **options: Any) -> None:
        ...
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_jobqueue import maintenance
from django_jobqueue.core.conf import get_config
from django_jobqueue.core.durations import parse_duration
from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.enqueue import jobs_database
from django_jobqueue.management import (
    cancelling,
    filtering,
    limiting,
    pausing,
    scheduling,
    tokens,
)
from django_jobqueue.management import status as status_report
from django_jobqueue.management.arguments import add_database as _add_database
from django_jobqueue.management.arguments import name as _name
from django_jobqueue.models import DEAD_STATUSES, Job, Worker
from django_jobqueue.operations import act_in_batches
from django_jobqueue.store import states
from django_jobqueue.store.audit import cli_actor, prune_audit, record
from django_jobqueue.store.licence import current_licence, describe_licence
from django_jobqueue.store.limits import limit_rows
from django_jobqueue.store.pauses import paused_queues
from django_jobqueue.store.states import state_label
from django_jobqueue.store.workerstats import live_workers

logger = logging.getLogger(__name__)

Handler = Callable[..., None]


@dataclass(frozen=True)
class Subcommand:
    """One ``jobqueue`` subcommand: its name, help, options and handler."""

    #: Name typed after ``jobqueue``.
    name: str
    #: One line shown by ``--help``.
    help: str
    #: Adds the subcommand's options to its parser.
    arguments: Callable[[CommandParser], None]
    #: Runs it: ``handler(command, **options)``, options keyword-only.
    handler: Handler


#: Registered subcommands, in ``--help`` order.
SUBCOMMANDS: dict[str, Subcommand] = {}


def _no_arguments(parser: CommandParser) -> None:
    """Add no options."""


def subcommand(
    name: str, *, help: str, arguments: Callable[[CommandParser], None] = _no_arguments
) -> Callable[[Handler], Handler]:
    """Register the decorated function as the ``jobqueue <name>`` subcommand.

    Parameters
    ----------
    name
        The subcommand's name.
    help
        One line for ``--help``.
    arguments
        Adds the subcommand's options to its parser.

    Returns
    -------
    Callable
        The decorator; it returns the function unchanged.
    """

    def register(handler: Handler) -> Handler:
        SUBCOMMANDS[name] = Subcommand(name=name, help=help, arguments=arguments, handler=handler)
        return handler

    return register


# Argument types -----------------------------------------------------------------


#: Largest integer option (a batch size): every database's LIMIT takes it.
_MAX_INT_OPTION = 1_000_000
#: Longest duration option: now minus it must stay a date every database stores.
_MAX_DURATION = timedelta(days=100 * 365)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= _MAX_INT_OPTION:
        raise argparse.ArgumentTypeError(
            f"must be an integer from 1 to {_MAX_INT_OPTION:,}: got {text!r}"
        )
    return value


def _pause_ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 60_000:
        raise argparse.ArgumentTypeError(f"must be an integer from 0 to 60,000 ms: got {text!r}")
    return value


def _duration(text: str) -> timedelta:
    try:
        value = parse_duration(text, name="the duration")
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc).rstrip(".")) from exc
    if value > _MAX_DURATION:
        raise argparse.ArgumentTypeError(
            f"must be at most {_MAX_DURATION.days:,} days: got {text!r}"
        )
    return value


def _jobs_database(database: str | None) -> str:
    return database or jobs_database()


# status -------------------------------------------------------------------------

#: The count columns of the status table: the state words (docs/console.md#states).
_STATUS_COLUMNS = list(states.STATES)


def _status_arguments(parser: CommandParser) -> None:
    _add_database(parser)
    parser.add_argument(
        "--queue",
        action="append",
        type=_name,
        dest="queues",
        metavar="QUEUE",
        help="Report only this queue (repeatable; default: every queue with a job, "
        "statistics in the last hour or a pause).",
    )
    parser.add_argument(
        "--json", action="store_true", dest="as_json", help="Print JSON instead of a table."
    )


def _format_age(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}"


@subcommand(
    "status",
    help="Per queue: jobs by state (scheduled, waiting, running, failed, done, cancelled, "
    "blocked), the oldest due job's wait (s), the busy workers and "
    "the attempts done, failed and dead-lettered in the last hour; then the paused "
    "queues, the limits in force and the live workers, idle ones included.",
    arguments=_status_arguments,
)
def _status(
    command: Command,
    *,
    database: str | None,
    queues: list[str] | None,
    as_json: bool,
    **options: Any,
) -> None:
    using = _jobs_database(database)
    rows = status_report.queue_report(using, queues)
    workers = maintenance.busy_workers(using)
    live = live_workers(using)
    paused = sorted(paused_queues(using, max_age_s=0))
    limited = limit_rows(using)
    if as_json:
        data = {
            "queues": rows,
            "limits": limited,
            "paused_queues": paused,
            "busy_workers": workers,
            "live_workers": [_worker_dict(worker) for worker in live],
        }
        command.stdout.write(json.dumps(data, indent=2, sort_keys=True))
        return
    if not rows:
        command.stdout.write("No jobs.")
        _write_paused(command, paused)
        _write_limits(command, limited)
        _write_live_workers(command, live)
        return
    header = [
        "queue",
        *_STATUS_COLUMNS,
        "oldest_waiting_s",
        "busy_workers",
        *status_report.STATS_COLUMNS,
    ]
    table = [
        [
            row["queue"],
            *(str(row["states"][word]) for word in _STATUS_COLUMNS),
            _format_age(row["oldest_waiting_s"]),
            str(row["busy_workers"]),
            *status_report.table_cells(row),
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *table]) for i in range(len(header))]
    for line in [header, *table]:
        cells = [line[0].ljust(widths[0])] + [
            cell.rjust(width) for cell, width in zip(line[1:], widths[1:], strict=True)
        ]
        command.stdout.write("  ".join(cells).rstrip())
    command.stdout.write(f"Busy workers (holding a job now): {workers}")
    _write_paused(command, paused)
    _write_limits(command, limited)
    _write_live_workers(command, live)


def _write_paused(command: Command, paused: list[str]) -> None:
    """One line naming the paused queues (``jobqueue pause``); nothing when none is."""
    if paused:
        command.stdout.write(f"Paused queues (not claimed until resumed): {', '.join(paused)}")


def _write_limits(command: Command, limited: list[dict[str, Any]]) -> None:
    """The flow-control limits in force under a heading of their own (as the live
    workers have), one line each (``jobqueue limits list``); nothing when none is."""
    if limited:
        command.stdout.write(f"Limits: {len(limited)}")
        limiting.write_rows(command, limited)


def _worker_dict(worker: Worker) -> dict[str, Any]:
    return {
        "name": worker.name,
        "kind": worker.kind,
        "host": worker.host,
        "pid": worker.pid,
        "queues": worker.queues,
        "concurrency": worker.concurrency,
        "busy": worker.busy,
        "done": worker.done,
        "failed": worker.failed,
        "version": worker.version,
        "started_at": worker.started_at.isoformat(),
        "last_seen_at": worker.last_seen_at.isoformat(),
    }


def _write_live_workers(command: Command, live: list[Worker]) -> None:
    """The live-workers table (seen within three heartbeats), idle ones included;
    nothing when there is none."""
    if not live:
        return
    command.stdout.write(f"Live workers: {len(live)}")
    header = ["name", "kind", "queues", "busy", "concurrency", "done", "failed", "last_seen"]
    table = [
        [
            w.name,
            w.kind,
            ",".join(w.queues) or "*",
            str(w.busy),
            str(w.concurrency),
            str(w.done),
            str(w.failed),
            w.last_seen_at.strftime("%Y-%m-%d %H:%M:%S"),
        ]
        for w in live
    ]
    widths = [max(len(line[i]) for line in [header, *table]) for i in range(len(header))]
    for line in [header, *table]:
        command.stdout.write(
            "  ".join(c.ljust(n) for c, n in zip(line, widths, strict=True)).rstrip()
        )


# prune --------------------------------------------------------------------------


def _prune_arguments(parser: CommandParser) -> None:
    _add_database(parser)
    parser.add_argument(
        "--retention",
        type=_duration,
        default=None,
        help="Delete done and cancelled jobs finished longer ago than this duration "
        "('12h', '7d', seconds; default: JOBQUEUE['RETENTION']).",
    )
    parser.add_argument(
        "--dead",
        action="store_true",
        help="Also delete dead letters past their keep, even when JOBQUEUE['CLEAN_ERROR'] "
        "is False.",
    )
    parser.add_argument(
        "--keep",
        type=_duration,
        default=None,
        help="With dead letters: delete those finished longer ago than this duration "
        "(default: each job's own keep, from its job type, queue or JOBQUEUE['KEEP']).",
    )
    parser.add_argument(
        "--batch-size",
        type=_positive_int,
        default=maintenance.DEFAULT_BATCH_SIZE,
        help="Jobs per DELETE statement (default: %(default)r).",
    )
    parser.add_argument(
        "--pause-ms",
        type=_pause_ms,
        default=0,
        help="Sleep between two batches, in ms, to spread a big prune's writes over time "
        "(default: %(default)r).",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="Count what would be deleted; delete nothing."
    )


@subcommand(
    "prune",
    help="Delete done jobs older than RETENTION, dead letters past keep when asked, and "
    "audit log rows older than AUDIT_KEEP.",
    arguments=_prune_arguments,
)
def _prune(
    command: Command,
    *,
    database: str | None,
    retention: timedelta | None,
    dead: bool,
    keep: timedelta | None,
    batch_size: int,
    pause_ms: int,
    dry_run: bool,
    **options: Any,
) -> None:
    include_dead = dead or get_config().CLEAN_ERROR
    if keep is not None and not include_dead:
        raise CommandError(
            "--keep applies to dead letters, which are not pruned; add --dead or set "
            "JOBQUEUE['CLEAN_ERROR'] = True."
        )
    using = _jobs_database(database)
    counts = maintenance.prune(
        using,
        retention=retention,
        keep=keep,
        dead=include_dead,
        batch_size=batch_size,
        dry_run=dry_run,
        pause_ms=pause_ms,
    )
    audit_rows = prune_audit(using, dry_run=dry_run)
    if not dry_run:  # many short transactions by design: recorded once they are done
        detail = {"done": counts.done, "cancelled": counts.cancelled, "dead": counts.dead}
        record(using, cli_actor(), "prune", target="finished jobs", detail=detail)
    verb = "Would delete" if dry_run else "Deleted"
    if include_dead:
        command.stdout.write(
            f"{verb} {counts.done} done, {counts.cancelled} cancelled and {counts.dead} dead jobs."
        )
    else:
        command.stdout.write(f"{verb} {counts.done} done and {counts.cancelled} cancelled jobs.")
        command.stdout.write(
            "Dead letters kept: JOBQUEUE['CLEAN_ERROR'] is False; add --dead to prune them."
        )
    if audit_rows:
        command.stdout.write(
            f"{verb} {audit_rows} audit log row(s) older than JOBQUEUE['AUDIT_KEEP']."
        )


# retry --------------------------------------------------------------------------


def _retry_arguments(parser: CommandParser) -> None:
    _add_database(parser)
    parser.add_argument("--queue", type=_name, help="Retry the dead letters of this queue.")
    parser.add_argument(
        "--type", type=_name, dest="job_type", help="Retry the dead letters of this job type."
    )
    parser.add_argument(
        "--jid",
        action="append",
        type=_name,
        dest="jids",
        metavar="JID",
        help="Retry this dead letter (repeatable).",
    )
    parser.add_argument(
        "--all", action="store_true", dest="retry_all", help="Retry every dead letter."
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="Count what would be retried; change nothing."
    )
    filtering.add_filter_argument(parser, "retry")


def _check_jids(using: str, jids: list[str]) -> None:
    rows = {job.jid: job for job in Job.objects.using(using).filter(jid__in=jids)}
    found = {jid: job.status for jid, job in rows.items()}
    missing = [jid for jid in jids if jid not in found]
    if missing:
        raise CommandError(
            f"No job has jid {', '.join(missing)}; copy the jid from the admin or the logs."
        )
    now = timezone.now()
    alive = [
        f"{jid} is {state_label(rows[jid], now)}" for jid in jids if found[jid] not in DEAD_STATUSES
    ]
    if alive:
        raise CommandError(
            "Only failed jobs (dead letters: error, max_retry) can be retried, but "
            f"{', '.join(alive)}; leave those out."
        )


@subcommand(
    "retry",
    help="Run dead letters (error, max_retry) again, due now, attempts from 1.",
    arguments=_retry_arguments,
)
def _retry(
    command: Command,
    *,
    database: str | None,
    queue: str | None,
    job_type: str | None,
    jids: list[str] | None,
    retry_all: bool,
    dry_run: bool,
    job_filter: str | None = None,
    **options: Any,
) -> None:
    if job_filter is not None:
        if queue is not None or job_type is not None or jids is not None or retry_all:
            raise CommandError("--filter says which jobs to retry; give it alone.")
        filtering.act_on_filter(command, "retry", job_filter, database=database, dry_run=dry_run)
        return
    narrowed = queue is not None or job_type is not None or jids is not None
    if not narrowed and not retry_all:
        raise CommandError(
            "Choose the dead letters to retry: give --queue, --type, --jid or --all."
        )
    if narrowed and retry_all:
        raise CommandError(
            "--all retries every dead letter; give it without --queue, --type or --jid."
        )
    using = _jobs_database(database)
    if jids is not None:
        _check_jids(using, jids)
    jobs = maintenance.dead_jobs(using, queue=queue, job_type=job_type, jids=jids)
    if dry_run:
        command.stdout.write(f"Would retry {_dead_jobs(jobs.count())}.")
        return
    target = _retry_target(queue, job_type, jids)
    counts = act_in_batches(jobs, "retry", cli_actor(), target=target)
    dead = counts.get("dead", 0)
    due = "it is" if dead == 1 else "they are"
    command.stdout.write(f"Retried {_dead_jobs(dead)}; {due} due now.")


def _retry_target(queue: str | None, job_type: str | None, jids: list[str] | None) -> str:
    """What a retry acts on, in words, for the audit log."""
    if jids is not None and len(jids) == 1 and queue is None and job_type is None:
        return f"job {jids[0]}"
    parts = [f"{name}={value}" for name, value in (("queue", queue), ("type", job_type)) if value]
    if jids is not None:
        parts.append(f"{len(jids)} jids")
    return "dead jobs" + (" of " + ", ".join(parts) if parts else "")


def _dead_jobs(count: int) -> str:
    """Return ``count`` dead job(s) in English: "1 dead job", "3 dead jobs"."""
    return f"{count} dead job" if count == 1 else f"{count} dead jobs"


# licence ------------------------------------------------------------------------


@subcommand("licence", help="Say which edition (Core or Pro) is in force and until when.")
def _licence(command: Command, **options: Any) -> None:
    command.stdout.write(describe_licence(current_licence()))


subcommand(
    "schedules",
    help="List the schedules with their next run (UTC); enable, disable, run now, sync; "
    "create, edit, delete, show.",
    arguments=scheduling.arguments,
)(scheduling.handle)


subcommand(
    "token", help="Create, list or revoke the SDK gateway's API tokens.", arguments=tokens.arguments
)(tokens.handle)


subcommand(
    "pause", help="Pause a queue: workers stop claiming its jobs.", arguments=pausing.arguments
)(pausing.pause)
subcommand("resume", help="Resume a paused queue.", arguments=pausing.arguments)(pausing.resume)
subcommand(
    "limits",
    help="List, set or clear flow-control limits (concurrency, rate, per key).",
    arguments=limiting.arguments,
)(limiting.handle)
subcommand(
    "cancel",
    help="Cancel waiting jobs and ask running ones to stop, by jid or by queue.",
    arguments=cancelling.arguments,
)(cancelling.cancel)
subcommand(
    "delete",
    help="Delete every job a filter selects, running ones excepted (Pro).",
    arguments=filtering.delete_arguments,
)(filtering.delete)


# The command --------------------------------------------------------------------


class Command(BaseCommand):
    """``manage.py jobqueue <subcommand>``: see :data:`SUBCOMMANDS`."""

    help = "Inspect and maintain the job queue: " + ", ".join(SUBCOMMANDS) + "."

    def add_arguments(self, parser: CommandParser) -> None:
        """Add one subparser per registered subcommand."""
        subparsers = parser.add_subparsers(
            dest="subcommand", required=True, metavar="{" + ",".join(SUBCOMMANDS) + "}"
        )
        for sub in SUBCOMMANDS.values():
            sub.arguments(subparsers.add_parser(sub.name, help=sub.help, description=sub.help))

    def handle(self, *, subcommand: str, verbosity: int = 1, **options: Any) -> None:
        """Run the chosen subcommand; user mistakes raise ``CommandError``."""
        if verbosity >= 2:  # -v 2: what was done; -v 3: each batch
            logging.getLogger("django_jobqueue").setLevel(
                logging.INFO if verbosity == 2 else logging.DEBUG
            )
        SUBCOMMANDS[subcommand].handler(self, **options)
