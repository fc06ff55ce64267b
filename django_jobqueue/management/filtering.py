"""``--filter`` of ``manage.py jobqueue retry|cancel|delete``: act on every job a filter
selects (docs/console.md "Search syntax" and "Bulk by filter").

Acting on everything a filter selects is the console's Pro bulk action, so it needs a
Pro licence here as well (docs/design.md#core-and-pro); the per-jid and per-queue
forms of ``retry`` and ``cancel`` stay Core. The work runs in audited batches
(:func:`django_jobqueue.operations.act_in_batches`): one audit row per command.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobqueue.core.exceptions import ProRequired
from django_jobqueue.management.arguments import add_database, jobs_database_of
from django_jobqueue.models import Job
from django_jobqueue.operations import act_in_batches
from django_jobqueue.store.audit import cli_actor
from django_jobqueue.store.jobfilter import FilterError, parse_filter
from django_jobqueue.store.licence import require_pro

__all__ = ["act_on_filter", "add_filter_argument", "delete", "delete_arguments"]

#: What each action's counts are called, for the command's one line of output.
_SAID = {
    "retry": ("dead", "Retried {dead} job(s); they are due now."),
    "cancel": (
        "cancelled",
        "Cancelled {cancelled} waiting job(s); asked the workers of {requested} running "
        "job(s) to stop.",
    ),
    "delete": (
        "deleted",
        "Deleted {deleted} job(s); left {running} running job(s) alone.",
    ),
}


def add_filter_argument(parser: CommandParser, action: str) -> None:
    """Add ``--filter`` (and ``--dry-run`` unless the parser has it) to ``parser``."""
    parser.add_argument(
        "--filter",
        dest="job_filter",
        metavar="FILTER",
        help=f"{action.capitalize()} every job this filter selects (Pro; docs/console.md "
        "'Search syntax'), e.g. 'queue:mail state:failed payload.customer_id:42'.",
    )


def act_on_filter(
    command: BaseCommand,
    action: str,
    text: str,
    *,
    database: str | None,
    dry_run: bool = False,
    batch_size: int = 500,
) -> dict[str, int]:
    """Apply ``action`` (retry, cancel, delete) to the jobs ``text`` selects; say counts.

    Raises
    ------
    CommandError
        Without a Pro licence, or when the filter cannot be read (naming the term);
        nothing is changed then.
    """
    try:
        require_pro(f"jobqueue {action} --filter")
    except ProRequired as exc:
        raise CommandError(f"{exc} (docs/design.md#core-and-pro)") from exc
    try:
        query = parse_filter(text)
    except FilterError as exc:
        raise CommandError(f"Bad --filter: {exc}") from exc
    using = jobs_database_of(database)
    jobs = query.apply(Job.objects.using(using).all())
    if dry_run:
        command.stdout.write(f"Would {action} up to {jobs.count()} job(s) matching the filter.")
        return {}
    counts = act_in_batches(
        jobs, action, cli_actor(), target=f"jobs matching {query.describe()}", batch_size=batch_size
    )
    _key, said = _SAID[action]
    command.stdout.write(said.format_map({"dead": 0, "requested": 0, "running": 0, **counts}))
    return counts


def delete_arguments(parser: CommandParser) -> None:
    """Add ``--filter`` (required), ``--dry-run`` and ``--database``."""
    add_database(parser)
    add_filter_argument(parser, "delete")
    parser.add_argument("--dry-run", action="store_true", help="Count; change nothing.")


def delete(
    command: BaseCommand,
    *,
    database: str | None = None,
    job_filter: str | None = None,
    dry_run: bool = False,
    **_: Any,
) -> None:
    """Delete the jobs a filter selects (running ones are left alone)."""
    if job_filter is None:
        raise CommandError("Choose the jobs to delete: give --filter (docs/console.md).")
    act_on_filter(command, "delete", job_filter, database=database, dry_run=dry_run)
