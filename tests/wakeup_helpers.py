"""A listener on the wake-up channel, for tests of what an enqueue NOTIFYs (PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import psycopg

from django_jobqueue.store import wakeups
from tests.conftest import direct_postgres_url


@contextmanager
def wakeup_listener() -> Iterator[Callable[[], list[str]]]:
    """``LISTEN`` on the wake-up channel on a connection of its own (to the server
    itself, not through a pooler, in autocommit); yield ``received()``: the queues
    of the wake-ups that came since the last call, within 0.5 s, in arrival order."""
    conn = psycopg.connect(direct_postgres_url(), autocommit=True)
    conn.execute(f'LISTEN "{wakeups.CHANNEL}"')
    try:
        yield lambda: [n.payload for n in conn.notifies(timeout=0.5)]
    finally:
        conn.close()
