"""``manage.py jobqueue pause|resume QUEUE``: the command's side of queue pauses."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.overview import jobs_database
from django_jobqueue.store import pauses

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
    try:
        changed = pauses.pause_queue(database or jobs_database(), queue, by="cli")
    except InvalidOption as exc:
        raise CommandError(str(exc)) from exc
    command.stdout.write(
        f"Queue {queue} paused." if changed else f"Queue {queue} was already paused."
    )


def resume(command: BaseCommand, *, queue: str, database: str | None = None, **_: Any) -> None:
    """Resume ``queue``."""
    try:
        changed = pauses.resume_queue(database or jobs_database(), queue)
    except InvalidOption as exc:
        raise CommandError(str(exc)) from exc
    command.stdout.write(f"Queue {queue} resumed." if changed else f"Queue {queue} was not paused.")
