"""``manage.py jobqueue token create|list|revoke``: the gateway's API tokens.

Parses and wires only: the work is in :mod:`django_jobqueue.store.apitokens`. ``create``
prints the token once, on its own last line; only its hash is stored. Create and
revoke are written to the audit log (docs/console.md "Audit log"), never the token's
text (a revoke by text records its first 12 characters, the prefix).
"""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone

from django_jobqueue.core.durations import parse_duration
from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.models import ApiToken
from django_jobqueue.overview import jobs_database
from django_jobqueue.store import apitokens
from django_jobqueue.store.audit import cli_actor, run_audited

__all__ = ["arguments", "handle"]


def _list(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise argparse.ArgumentTypeError("must name at least one, comma-separated")
    return items


def _duration(text: str) -> timedelta:
    try:
        return parse_duration(text, name="--expires-in")
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def arguments(parser: CommandParser) -> None:
    """Add ``create``, ``list`` and ``revoke`` with their options."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="{create,list,revoke}")
    create = actions.add_parser("create", help="Make a token and print it once.")
    create.add_argument("--name", required=True, help="A label for people.")
    create.add_argument(
        "--queues",
        type=_list,
        default=["*"],
        help="Allowed queues, comma-separated: names or 'prefix*' (default: %(default)r).",
    )
    create.add_argument(
        "--scopes",
        type=_list,
        default=["produce", "read"],
        help="Comma-separated among produce, work, read, admin (default: %(default)r).",
    )
    create.add_argument(
        "--expires-in", type=_duration, help="Lifetime, e.g. '90d' or '12h' (default: none)."
    )
    actions.add_parser("list", help="List the tokens (never their text).")
    revoke = actions.add_parser("revoke", help="Revoke tokens by prefix, text or name.")
    revoke.add_argument("token", help="A token's prefix (as 'list' shows), text or name.")


def handle(command: BaseCommand, *, action: str, **options: Any) -> None:
    """Run ``token <action>``; user mistakes raise ``CommandError``."""
    if action == "create":
        expires_in = options.get("expires_in")
        try:
            row, text = run_audited(
                jobs_database(),
                lambda: apitokens.issue_token(
                    options["name"],
                    queues=options["queues"],
                    scopes=options["scopes"],
                    expires_at=None if expires_in is None else timezone.now() + expires_in,
                ),
                cli_actor(),
                "token_create",
                target=f"token {options['name']}",
                counts=lambda made: {"created": 1},
            )
        except InvalidOption as exc:
            raise CommandError(str(exc)) from exc
        command.stdout.write(
            f"Token {row.prefix}... ({row.name}); copy it now, it is not shown again:"
        )
        command.stdout.write(text)
        return
    if action == "list":
        rows = ApiToken.objects.order_by("created_at", "pk")
        if not rows:
            command.stdout.write("No tokens.")
        for row in rows:
            state = "revoked" if row.revoked else "live"
            if row.expires_at is not None and row.expires_at <= timezone.now():
                state = "expired"
            command.stdout.write(
                f"{row.prefix}  {row.name}  {state}  queues={','.join(row.queues)}  "
                f"scopes={','.join(row.scopes)}  expires={row.expires_at or '-'}  "
                f"last_used={row.last_used_at or '-'}"
            )
        return
    count = run_audited(
        jobs_database(),
        lambda: apitokens.revoke_token(options["token"]),
        cli_actor(),
        "token_revoke",
        target=f"token {options['token'][:12]}",
        counts=lambda count: {"revoked": count},
    )
    if not count:
        raise CommandError(f"No live token has prefix or name {options['token']!r}.")
    command.stdout.write(f"Revoked {count} token(s).")
