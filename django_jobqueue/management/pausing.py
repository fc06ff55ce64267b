"""``manage.py jobqueue pause|resume QUEUE``: the command's side of queue pauses.

Each is written to the audit log in its own transaction (docs/console.md "Audit log").
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.overview import jobs_database
from django_jobqueue.store import pauses
from django_jobqueue.store.audit import cli_actor, run_audited

__all__ = ["arguments", "pause", "resume"]


def arguments(parser: CommandParser) -> None:
    """Add QUEUE and ``--database``."""
    parser.add_argument("queue", help="The queue's name.")
    parser.add_argument(
        "--database",
        default=None,
        help="Database alias of the jobs (default: %(default)r: JOBQUEUE's).",
    )


def pause(command: BaseCommand, *, queue: str, database: str | None = None, **_: Any) -> None:
    """Pause ``queue``: workers stop claiming its jobs within a second."""
    using = database or jobs_database()
    try:
        changed = run_audited(
            using,
            lambda: pauses.pause_queue(using, queue, by="cli"),
            cli_actor(),
            "pause",
            target=f"queue {queue}",
            counts=lambda changed: {"changed": int(changed)},
        )
    except InvalidOption as exc:
        raise CommandError(str(exc)) from exc
    command.stdout.write(
        f"Queue {queue} paused." if changed else f"Queue {queue} was already paused."
    )


def resume(command: BaseCommand, *, queue: str, database: str | None = None, **_: Any) -> None:
    """Resume ``queue``."""
    using = database or jobs_database()
    try:
        changed = run_audited(
            using,
            lambda: pauses.resume_queue(using, queue),
            cli_actor(),
            "resume",
            target=f"queue {queue}",
            counts=lambda changed: {"changed": int(changed)},
        )
    except InvalidOption as exc:
        raise CommandError(str(exc)) from exc
    command.stdout.write(f"Queue {queue} resumed." if changed else f"Queue {queue} was not paused.")
