"""Planner statistics of the job table that know its backlog (PostgreSQL).

A claim takes the first N waiting due rows in claim order; by the claim index
(``priority, run_at, id`` where ``waiting``) that reads about N rows. PostgreSQL
picks that plan only when its statistics say more than a few rows wait. With
statistics that do not know the backlog it reads every waiting row instead, sorts
them and keeps N, so each claim costs the whole backlog: 10 ms a claim at 20,000
waiting jobs against under 1 ms, and a no-op drain at 0.6 of its rate. That happens

- in a table never analyzed: the planner then guesses the row count from the
  table's size and its declared column widths (two ``varchar(1024)`` among them), a
  fortieth of the real count;
- after a burst into a table last analyzed while nearly every row had finished
  (``waiting`` almost never true).

Autovacuum's analyze comes once a tenth of the table changed, up to its naptime
later (60 s by default), and never where autovacuum is off. So each foreman's
housekeeping thread calls :func:`analyze_if_stale` at its start and every
:data:`CHECK_EVERY_S` seconds: one read of ``pg_stat_user_tables``, and, when the
statistics are stale (:func:`stale`), ``ANALYZE`` of the table (about 200 ms at
100,000 jobs; of the whole table, since one of some columns does not reset the count
of changed rows that makes them stale), under an advisory lock tried without waiting,
so one worker of a fleet runs it at a time, and ``SKIP_LOCKED``, so a lock held on the
table (a manual VACUUM, CREATE INDEX, ALTER TABLE) skips it rather than stall the
housekeeping thread. A database role that does not
own the table (nor holds ``MAINTAIN`` on it, PostgreSQL 17+) may not analyze it: it is
told once (a log line) and not asked again.

Implements: docs/design.md#claim-plan.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass

from django.db import connections, transaction

from ..models import Job

__all__ = [
    "CHECK_EVERY_S",
    "MIN_CHANGED",
    "RETRY_AFTER_FAILURE_S",
    "SHARE_CHANGED",
    "TableStats",
    "analyze_if_stale",
    "stale",
]

logger = logging.getLogger(__name__)

#: How often (s) a foreman looks whether the job table's statistics are stale.
CHECK_EVERY_S = 10.0
#: How long (s) a foreman waits after a check or analyze that failed (a statement
#: timeout shorter than the analyze, a dropped connection) before it tries again.
RETRY_AFTER_FAILURE_S = 300.0
#: Rows changed (inserted, updated, deleted) since the last analyze that make the
#: statistics stale however small the table, and that a never analyzed table needs.
MIN_CHANGED = 1000
#: The share of the table's rows changed since the last analyze that makes them stale
#: (autovacuum's own default, ``autovacuum_analyze_scale_factor``).
SHARE_CHANGED = 0.1
#: The advisory lock key of the analyze (one per database).
_LOCK_KEY = zlib.crc32(b"django_jobqueue.analyze_job_table")

#: Aliases whose role may not analyze the job table (told once, not asked again).
_not_owner: set[str] = set()


@dataclass(frozen=True)
class TableStats:
    """What PostgreSQL knows of the job table: ``rows`` (``reltuples``, -1 or 0 when
    never counted), ``changed`` (rows changed since the last analyze), ``analyzed``
    (whether it was ever analyzed, by anyone) and ``owner`` (whether this role may
    analyze it)."""

    rows: float
    changed: int
    analyzed: bool
    owner: bool


def stale(stats: TableStats) -> bool:
    """Whether ``stats`` no longer describe the table: at least :data:`MIN_CHANGED` rows
    changed since the last analyze (or ever, when never analyzed), and, once analyzed,
    at least :data:`SHARE_CHANGED` of its rows."""
    if stats.changed < MIN_CHANGED:
        return False
    return not stats.analyzed or stats.changed >= SHARE_CHANGED * max(stats.rows, 0.0)


def read_stats(using: str) -> TableStats:
    """Read the job table's :class:`TableStats` on ``using`` (PostgreSQL only).

    Raises
    ------
    DatabaseError
        If the database cannot be read (propagated, for the caller's retry).
    """
    table = connections[using].ops.quote_name(Job._meta.db_table)
    # PostgreSQL 17 lets a role that does not own a table analyze it with MAINTAIN.
    may = "pg_has_role(c.relowner, 'USAGE')"
    if getattr(connections[using], "pg_version", 0) >= 170000:
        may += " OR has_table_privilege(c.oid, 'MAINTAIN')"
    sql = (
        "SELECT c.reltuples, s.n_mod_since_analyze, "
        "s.last_analyze IS NOT NULL OR s.last_autoanalyze IS NOT NULL, " + may + " "
        "FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid "
        "WHERE c.oid = %s::regclass"
    )
    with connections[using].cursor() as cursor:
        cursor.execute(sql, [table])
        row = cursor.fetchone()
    if row is None:  # not a user table of this database: nothing to do
        return TableStats(rows=0.0, changed=0, analyzed=True, owner=False)
    rows, changed, analyzed, owner = row
    return TableStats(float(rows), int(changed or 0), bool(analyzed), bool(owner))


def analyze_if_stale(using: str) -> bool:
    """Analyze the job table on ``using`` if its statistics are stale;
    return whether this call analyzed it.

    Only on PostgreSQL (elsewhere: False, nothing read). Skipped when another worker
    analyzes now (the advisory lock is taken), when a lock on the table that ANALYZE
    needs is held (a manual VACUUM, CREATE INDEX, ALTER TABLE: never waited for), or
    when this role does not own the table (logged once per alias).

    Raises
    ------
    DatabaseError
        If the database fails the read or the analyze (the caller logs it and tries
        again at its next check).
    """
    if connections[using].vendor != "postgresql" or using in _not_owner:
        return False
    stats = read_stats(using)
    if not stale(stats):
        return False
    if not stats.owner:
        _not_owner.add(using)
        logger.info(
            "the job table's statistics are stale and this database role may not analyze it; "
            "claims may read the whole backlog until autovacuum does "
            "(docs/design.md#claim-plan)"
        )
        return False
    table = connections[using].ops.quote_name(Job._meta.db_table)
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return False  # another worker analyzes it now
        if not stale(read_stats(using)):
            return False  # another worker analyzed it since the read above
        # SKIP_LOCKED: a lock on the table that ANALYZE waits for (a manual VACUUM,
        # CREATE INDEX, an ALTER) skips it, rather than stalling the housekeeping
        # thread (reaping, schedules, statistics) for as long as that lock is held.
        # Inside this transaction ANALYZE keeps its table lock to the end, so
        # holding it says the table was analyzed.
        cursor.execute(f"ANALYZE (SKIP_LOCKED) {table}")
        cursor.execute(
            "SELECT EXISTS (SELECT FROM pg_locks WHERE locktype = 'relation' "
            "AND relation = %s::regclass AND pid = pg_backend_pid() "
            "AND mode = 'ShareUpdateExclusiveLock' AND granted)",
            [table],
        )
        if not cursor.fetchone()[0]:
            logger.debug("the job table is locked now: analyze skipped")
            return False
    logger.debug("analyzed the job table rows=%d changed=%d", stats.rows, stats.changed)
    return True
