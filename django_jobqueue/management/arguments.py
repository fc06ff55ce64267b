"""Argument types and options shared by the ``jobqueue`` subcommands."""

from __future__ import annotations

import argparse

from django.core.management.base import CommandParser
from django.db import connections

from django_jobqueue.enqueue import jobs_database

__all__ = ["add_database", "database_alias", "jobs_database_of", "name"]


def name(text: str) -> str:
    """Argument type of a queue, job type, jid or plan name: non-empty UTF-8 text."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    # Bytes that are not UTF-8 reach argv as lone surrogates, which no database stores.
    if "\x00" in text or any("\ud800" <= char <= "\udfff" for char in text):
        raise argparse.ArgumentTypeError(
            f"must be UTF-8 text without NUL: got {text!r}; check the terminal's encoding"
        )
    return text


def database_alias(text: str) -> str:
    """Argument type of ``--database``: a configured alias."""
    if text not in connections:
        known = ", ".join(sorted(connections))
        raise argparse.ArgumentTypeError(f"unknown database alias {text!r}; use one of {known}")
    return text


def add_database(parser: CommandParser) -> None:
    """Add ``--database``."""
    parser.add_argument(
        "--database",
        type=database_alias,
        default=None,
        help="Database alias of the jobs (default: JOBQUEUE['DATABASE'], else the routers').",
    )


def jobs_database_of(database: str | None) -> str:
    """Return ``--database``, else the jobs' database alias."""
    return database or jobs_database()
