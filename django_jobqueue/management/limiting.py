"""``manage.py jobqueue limits list|set|clear|prune``: flow-control limits at run time
(docs/limits.md).

``set`` and ``clear`` are written to the audit log in their own transaction
(docs/console.md "Audit log"); every worker of the fleet applies them within a second.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.core.limitspec import parse_rate, parse_target
from django_jobqueue.overview import jobs_database
from django_jobqueue.store import limits
from django_jobqueue.store.audit import cli_actor, run_audited
from django_jobqueue.store.registry import registered_job_types

__all__ = ["arguments", "handle", "write_rows"]


def _target(text: str) -> str:
    try:
        parse_target(text)
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc).rstrip(".")) from exc
    return text


def _rate(text: str) -> str:
    try:
        parse_rate(text)
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc).rstrip(".")) from exc
    return text


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1_000_000:
        raise argparse.ArgumentTypeError(f"must be an integer from 1 to 1,000,000: got {text!r}")
    return value


def _add_database(parser: CommandParser) -> None:
    parser.add_argument(
        "--database",
        default=None,
        help="Database alias of the jobs (default: %(default)r: JOBQUEUE's).",
    )


def arguments(parser: CommandParser) -> None:
    """Add the ``list``, ``set`` and ``clear`` actions and their options."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="{list,set,clear,prune}")
    listing = actions.add_parser("list", help="List the limits, declared and set, with their use.")
    listing.add_argument(
        "--json", action="store_true", dest="as_json", help="Print JSON instead of a table."
    )
    _add_database(listing)
    setting = actions.add_parser(
        "set",
        help="Set a target's limit at run time; it replaces the declared one until cleared "
        "(no option: lift the declared limit).",
    )
    setting.add_argument("target", type=_target, help="type:<job type> or queue:<queue>.")
    setting.add_argument(
        "--concurrency", type=_count, help="Most jobs processing at once (per key)."
    )
    setting.add_argument("--rate", type=_rate, help="Most starts per window: N/s, N/m or N/h.")
    setting.add_argument(
        "--burst", type=_count, help="The rate's bucket (default: one second's worth)."
    )
    setting.add_argument(
        "--partition", help="Per key: payload.<field>, or key (the enqueue's limit_key)."
    )
    setting.add_argument(
        "--fair", action="store_true", help="Rotate claims across keys (needs --partition)."
    )
    _add_database(setting)
    clearing = actions.add_parser("clear", help="Clear a target's run-time limit.")
    clearing.add_argument("target", type=_target, help="type:<job type> or queue:<queue>.")
    _add_database(clearing)
    pruning = actions.add_parser(
        "prune", help="Delete the limit rows untouched for an hour (they hold nothing)."
    )
    _add_database(pruning)


def handle(
    command: BaseCommand, *, action: str, database: str | None = None, **options: Any
) -> None:
    """Run ``limits <action>``; a bad limit raises ``CommandError`` and writes nothing."""
    using = database or jobs_database()
    if action == "list":
        _list(command, using, as_json=options.get("as_json", False))
        return
    if action == "prune":
        command.stdout.write(f"Limit rows deleted: {limits.prune_states(using)}.")
        return
    target = options["target"]
    try:
        if action == "set":
            given = {
                name: options.get(name)
                for name in ("concurrency", "rate", "burst", "partition")
                if options.get(name) is not None
            }
            if options.get("fair"):
                given["fair"] = True
            limit = run_audited(
                using,
                lambda: limits.set_limit(using, target, given, by="cli"),
                cli_actor(),
                "limit_set",
                target=target,
                counts=lambda _limit: {"changed": 1},
            )
            shown = json.dumps(limit.as_dict(), sort_keys=True) if limit.active else "no limit"
            command.stdout.write(f"Limit of {target} set: {shown}.")
            kind, name = parse_target(target)
            if kind == "type" and name not in registered_job_types():
                # Not an error: a gateway worker's job types are not registered here.
                command.stderr.write(
                    f"Note: no job type {name!r} is registered in this project; the limit "
                    "holds for jobs of that type (from a gateway worker, say)."
                )
        else:
            cleared = run_audited(
                using,
                lambda: limits.clear_limit(using, target),
                cli_actor(),
                "limit_clear",
                target=target,
                counts=lambda cleared: {"changed": int(cleared)},
            )
            command.stdout.write(
                f"Run-time limit of {target} cleared."
                if cleared
                else f"{target} had no run-time limit."
            )
    except InvalidOption as exc:
        raise CommandError(str(exc)) from exc


def _describe(limit: dict[str, Any] | None) -> str:
    if limit is None:
        return "-"
    if not limit:
        return "none"
    return " ".join(f"{name}={value}" for name, value in limit.items())


def _list(command: BaseCommand, using: str, *, as_json: bool) -> None:
    rows = limits.limit_rows(using)
    if as_json:
        command.stdout.write(json.dumps(rows, indent=2, sort_keys=True))
        return
    if not rows:
        command.stdout.write("No limits.")
        return
    write_rows(command, rows)


def write_rows(command: BaseCommand, rows: list[dict[str, Any]]) -> None:
    """Write one line per limit of :func:`limits.limit_rows` (and its busiest keys);
    nothing when there is none (``jobqueue status`` shows them too)."""
    for row in rows:
        effective = row["effective"]
        concurrency = effective.get("concurrency")
        use = f"{row['in_flight']}/{concurrency}" if concurrency else str(row["in_flight"])
        if concurrency and effective.get("partition"):
            # The concurrency holds per key, so the total may exceed it (as the
            # console's Limits page says): "3/1 per key" is three keys at one each.
            use += " per key"
        source = "set" if row["override"] is not None else "declared"
        if row["override"] is not None and "invalid" in row["override"]:
            # A row written by hand that the claims ignore (docs/limits.md).
            source = f"set, ignored: invalid={row['override']['invalid']}"
        command.stdout.write(
            f"{row['target']}: {_describe(effective)} ({source}); in flight {use}, "
            f"due {row['waiting']}"
        )
        if row["keys"]:
            busiest = ", ".join(f"{key or '-'}={count}" for key, count in row["keys"])
            command.stdout.write(f"  busiest keys (in flight): {busiest}")
