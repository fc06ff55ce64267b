"""``manage.py jobqueue schedules --create/--edit/--delete/--show NAME``: plans at run time.

Each change writes its audit row (source ``cli``, the operating-system user) in the
change's own transaction (docs/console.md "Schedules"). Bad input is a
``CommandError`` naming the value; nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobqueue import schedules
from django_jobqueue.core.exceptions import DuplicateJob, InvalidRequest
from django_jobqueue.management.arguments import name
from django_jobqueue.models import ScheduleJob
from django_jobqueue.store.audit import cli_actor

__all__ = ["add_plan_arguments", "add_plan_options", "handle_plan"]

#: The option of each field an edit may change.
_FIELD_OPTIONS = {"cron": "cron", "timezone": "timezone", "payload": "payload", "queue": "queue"}


def add_plan_arguments(action: Any) -> None:
    """Add ``--create``, ``--edit``, ``--delete``, ``--show`` to the exclusive ``action`` group."""
    for flag, help_text in (
        ("--create", "Create a cron plan NAME (needs --job-type and --cron)."),
        ("--edit", "Change plan NAME's --cron, --timezone, --payload or --queue."),
        ("--delete", "Delete plan NAME (the jobs it made stay)."),
        ("--show", "Show plan NAME, its next five runs and its last jobs."),
    ):
        action.add_argument(flag, type=name, metavar="NAME", help=help_text)


def add_plan_options(parser: CommandParser) -> None:
    """Add the field options of ``--create`` and ``--edit``."""
    parser.add_argument("--job-type", type=name, help="The plan's job type (--create).")
    parser.add_argument("--cron", help="A cron expression, such as '0 3 * * *'.")
    parser.add_argument("--timezone", help="An IANA time zone, such as Europe/Paris.")
    parser.add_argument("--payload", help="The jobs' payload, as JSON.")
    parser.add_argument("--queue", type=name, help="The jobs' queue.")


def _payload(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CommandError(f"--payload must be JSON: got {text!r} ({exc.msg}).") from exc


def _show(command: BaseCommand, using: str, plan: ScheduleJob) -> None:
    summary = schedules.plan_summary(plan)
    for key in ("name", "job_type", "queue", "when", "enabled", "status", "source"):
        command.stdout.write(f"{key}: {summary[key]}")
    if plan.source in schedules.DECLARED_SOURCES:
        command.stdout.write(f"declared in {plan.source}: can be paused, not edited or deleted")
    if plan.cron:
        command.stdout.write("next runs:")
        for tick in schedules.preview_runs(plan.cron, plan.timezone):
            command.stdout.write(f"  {tick.isoformat()}")
    command.stdout.write("last jobs (newest first):")
    for job in schedules.plan_history(using, plan.name, limit=10):
        command.stdout.write(f"  {job.jid}  {job.status}  {job.created_at.isoformat()}")


def handle_plan(command: BaseCommand, using: str, options: dict[str, Any]) -> bool:
    """Run ``--create``/``--edit``/``--delete``/``--show`` if given; return whether one ran.

    Raises
    ------
    CommandError
        A missing plan, a declared plan's edit or delete, a bad cron, time zone,
        queue or payload, or a name taken; the message names the value.
    """
    create, edit, delete, show = (options.get(key) for key in ("create", "edit", "delete", "show"))
    actor = cli_actor()
    try:
        if create:
            if not options.get("job_type") or not options.get("cron"):
                raise CommandError("--create needs --job-type and --cron.")
            schedules.create_cron_plan(
                using,
                create,
                options["job_type"],
                cron=options["cron"],
                tz_name=options.get("timezone") or "UTC",
                payload=_payload(options.get("payload")),
                queue=options.get("queue"),
                actor=actor,
            )
            _show(command, using, ScheduleJob.objects.using(using).get(name=create))
            return True
        if edit:
            changes = {
                field: options[option]
                for field, option in _FIELD_OPTIONS.items()
                if options.get(option) is not None
            }
            if "payload" in changes:
                changes["payload"] = _payload(changes["payload"])
            if not changes:
                raise CommandError("--edit needs one of --cron, --timezone, --payload, --queue.")
            diff = schedules.edit_plan(using, edit, actor=actor, **changes)
            command.stdout.write(
                f"{edit}: {', '.join(diff)} changed." if diff else f"{edit}: unchanged."
            )
            _show(command, using, ScheduleJob.objects.using(using).get(name=edit))
            return True
        if delete:
            schedules.delete_plan(using, delete, actor=actor)
            command.stdout.write(f"Deleted schedule {delete}; the jobs it made stay.")
            return True
        if show:
            _show(command, using, ScheduleJob.objects.using(using).get(name=show))
            return True
    except ScheduleJob.DoesNotExist as exc:
        missing = edit or delete or show
        raise CommandError(
            f"No schedule is named {missing}; run 'jobqueue schedules' to list them."
        ) from exc
    except (InvalidRequest, DuplicateJob) as exc:
        raise CommandError(str(exc)) from exc
    return False
