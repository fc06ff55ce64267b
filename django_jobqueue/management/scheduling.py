"""``manage.py jobqueue schedules``: list the schedules; enable, disable, run now, sync;
create, edit, delete and show a plan (:mod:`.plan_editing`).

Enable, disable and run now are written to the audit log in their own transaction
(docs/console.md "Audit log").
"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobqueue import schedules
from django_jobqueue.management.arguments import add_database, jobs_database_of, name
from django_jobqueue.management.plan_editing import (
    add_plan_arguments,
    add_plan_options,
    handle_plan,
)
from django_jobqueue.models import ScheduleJob
from django_jobqueue.store.audit import cli_actor, run_audited

__all__ = ["arguments", "handle"]


def arguments(parser: CommandParser) -> None:
    """Add the options of ``jobqueue schedules``."""
    add_database(parser)
    action = parser.add_mutually_exclusive_group()
    for flag, help_text in (
        ("--enable", "Enable this plan (repeatable); a cron plan starts at its next tick."),
        ("--disable", "Disable this plan (repeatable)."),
        ("--run-now", "Make one job of this plan now (repeatable); its next run stays."),
    ):
        action.add_argument(flag, action="append", type=name, metavar="NAME", help=help_text)
    action.add_argument(
        "--sync",
        action="store_true",
        help="Write the declared plans (@job cron, JOBQUEUE['SCHEDULES']) now, as a "
        "foreman does when it starts.",
    )
    add_plan_arguments(action)
    add_plan_options(parser)
    parser.add_argument(
        "--json", action="store_true", dest="as_json", help="Print JSON instead of a table."
    )


def handle(
    command: BaseCommand,
    *,
    database: str | None,
    enable: list[str] | None,
    disable: list[str] | None,
    run_now: list[str] | None,
    sync: bool,
    as_json: bool,
    **options: Any,
) -> None:
    """List the schedules; enable, disable, run now or sync them (audited)."""
    using = jobs_database_of(database)
    if handle_plan(command, using, options):
        return
    names = enable or disable or run_now
    if names:
        known = set(
            ScheduleJob.objects.using(using).filter(name__in=names).values_list("name", flat=True)
        )
        missing = [plan for plan in names if plan not in known]
        if missing:
            raise CommandError(
                f"No schedule is named {', '.join(missing)}; run 'jobqueue schedules' to list them."
            )
    if enable or disable:
        count = run_audited(
            using,
            lambda: schedules.set_enabled(using, names or [], enabled=bool(enable)),
            cli_actor(),
            "enable" if enable else "disable",
            target="schedules " + ", ".join(names or []),
            counts=lambda count: {"changed": count},
        )
        command.stdout.write(f"{'Enabled' if enable else 'Disabled'} {count} schedule(s).")
        return
    if run_now:
        for plan in run_now:

            def run(plan: str = plan) -> str:
                return schedules.run_now(using, plan)

            jid = run_audited(
                using,
                run,
                cli_actor(),
                "run",
                target=f"schedule {plan}",
                counts=lambda jid: {"enqueued": 1},
            )
            command.stdout.write(f"{plan}: job {jid}")
        return
    if sync:
        counts = schedules.sync_declared_plans(using)
        command.stdout.write(", ".join(f"{key} {value}" for key, value in counts.items()) + ".")
        return
    rows = [
        schedules.plan_summary(plan) for plan in ScheduleJob.objects.using(using).order_by("name")
    ]
    if as_json:
        command.stdout.write(json.dumps(rows, indent=2, sort_keys=True, default=str))
        return
    if not rows:
        command.stdout.write("No schedules.")
        return
    header = ["name", "when", "enabled", "status", "source", "next_run_at", "last_outcome"]
    table = [
        [
            str(row[key].isoformat() if hasattr(row[key], "isoformat") else row[key])
            if row[key] is not None
            else "-"
            for key in header
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in [header, *table]) for i in range(len(header))]
    for line in [header, *table]:
        command.stdout.write(
            "  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        )
