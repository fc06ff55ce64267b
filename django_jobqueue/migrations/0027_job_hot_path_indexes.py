"""Fewer index entries per job on its way through the queue, on PostgreSQL.

A job's row is written three times: the enqueue inserts it, the claim and the outcome
update it. None of those updates can be HOT (each changes an indexed column), so each
new row version gets an entry in every index whose predicate it meets: 29 entries
per plain job across the job table's indexes before this migration, 18 after it.
Five indexes that only some states need become partial, under their names and
with the same leading columns where a query names them:

- ``jq_job_claim_idx`` ``(queue, priority, run_at, id) WHERE waiting`` and
  ``jq_job_claim_any_idx`` ``(priority, run_at, id) WHERE waiting``: a claim reads
  waiting rows only; the claimed and finished versions wrote entries under
  ``waiting = false`` that nothing read. The claim statement writes ``waiting =
  TRUE`` as a literal, so a prepared (generic) plan still matches the predicate.
- ``jq_job_lease_idx`` ``(status, lease_expires_at) WHERE status = 'processing'``:
  the reaper looks for expired leases of running jobs only.
- ``jq_job_finished_idx`` ``(status, finished_at) WHERE`` the status is an ending
  (done, error, max_retry, cancelled) or ``blocked``: prune reads the ended rows,
  the workflows' lists and checks the blocked ones (few, written once); waiting and
  running rows have their own indexes (the claim indexes, ``jq_job_running_idx``).
- ``jq_job_origin_idx`` ``(origin, created_at) WHERE origin >= 'schedule:' AND
  origin < 'schedule;'``: a plan's run history looks up its own origin
  (``schedule:<name>``, which PostgreSQL proves is in that range); a job enqueued
  by code (``code:<module>...``) or the gateway has another.

``jq_job_queue_idx`` ``(queue, status, finished_at)`` stays whole: a queue's list,
count, cancel or delete of every state reads it (a small queue among a million jobs
in well under a millisecond, against about 100 ms without it).

Measured against the indexes before it, three alternating rounds on one quiet machine
(medians): ``enqueue_many`` of 5,000 jobs (bench/bulk_copy.py) 48,125 -> 56,790
jobs/s (1.18x), CPU per job (client and server) 19.5 -> 16.8 us; a no-op drain
(bench/process_scaling.py, ``--no-log-success``) at 2 processes x 12 slots 8,276 ->
9,934 jobs/s steady (1.20x), at 1 x 4 4,320 -> 4,754 (1.10x) (docs/design.md#indexes).

PostgreSQL only, as 0004, 0006 and 0024: MySQL has no partial index, and SQLite
does not match one to a filter whose value is a bound parameter. The model's
``Meta`` keeps naming the indexes by their full column lists, so Django's migration
state is unchanged. Each index is rebuilt ``CONCURRENTLY`` (a live table keeps
taking writes) under a new name, then the old one dropped and the new one renamed.
A run stopped half way runs again to the end: it first waits for another session's
index statement on the table to end (the stopped run's own, which the server
finishes after its client is gone), then starts each swap from its build.
"""

import logging
import time
from typing import Any

from django.db import migrations

#: The ended statuses, and blocked (docs/design.md#states).
FINISHED = "status IN ('done', 'error', 'max_retry', 'cancelled', 'blocked')"

#: name: (columns before, columns after, predicate after)
INDEXES = {
    "jq_job_claim_idx": (
        "(waiting, queue, priority, run_at, id)",
        "(queue, priority, run_at, id)",
        "waiting",
    ),
    "jq_job_claim_any_idx": (
        "(waiting, priority, run_at, id)",
        "(priority, run_at, id)",
        "waiting",
    ),
    "jq_job_lease_idx": (
        "(status, lease_expires_at)",
        "(status, lease_expires_at)",
        "status = 'processing'",
    ),
    "jq_job_finished_idx": ("(status, finished_at)", "(status, finished_at)", FINISHED),
    "jq_job_origin_idx": (
        "(origin, created_at)",
        "(origin, created_at)",
        "origin >= 'schedule:' AND origin < 'schedule;'",
    ),
}


logger = logging.getLogger(__name__)

#: The other client sessions holding the job table's lock for an index statement run
#: CONCURRENTLY (``CREATE``, ``DROP``, ``REINDEX``). Such a statement of a stopped
#: run goes on on the server after its client was killed, holding the table's
#: ``SHARE UPDATE EXCLUSIVE`` lock. A statement of this run waiting for that lock
#: holds a snapshot, which the other build's last phase waits for: PostgreSQL
#: breaks that deadlock by failing one of the two, often this run.
OTHER_BUILDS = (
    "SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
    "WHERE l.locktype = 'relation' AND l.relation = %s::regclass AND l.granted "
    "AND l.mode = 'ShareUpdateExclusiveLock' AND l.pid <> pg_backend_pid() "
    "AND a.backend_type = 'client backend' AND a.query ILIKE '%%INDEX%%CONCURRENTLY%%'"
)


def _wait_for_other_builds(schema_editor: Any, table: str) -> None:
    """Return once no other session runs an index statement on ``table`` (polled
    every 0.1 s, for as long as it runs; one warning log line names them)."""
    warned = False
    with schema_editor.connection.cursor() as cursor:
        while True:
            cursor.execute(OTHER_BUILDS, [table])
            pids = [row[0] for row in cursor.fetchall()]
            if not pids:
                return
            if not warned:
                logger.warning("waiting for the index statements on %s of sessions %s", table, pids)
                warned = True
            time.sleep(0.1)


def _swap(schema_editor: Any, table: str, name: str, columns: str, predicate: str) -> None:
    """Make index ``name`` be ``columns`` (``WHERE predicate`` unless empty)."""
    quote = schema_editor.quote_name
    building = f"{name}_new"
    where = f" WHERE {predicate}" if predicate else ""
    # A run interrupted after the build leaves an index under the building name,
    # valid or not: start it again.
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(building)}")
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY {quote(building)} ON {table} {columns}{where}"
    )
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(name)}")
    schema_editor.execute(f"ALTER INDEX {quote(building)} RENAME TO {quote(name)}")


def _table(apps: Any, schema_editor: Any) -> str:
    job = apps.get_model("django_jobqueue", "Job")
    return str(schema_editor.quote_name(job._meta.db_table))


def partial(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = _table(apps, schema_editor)
    _wait_for_other_builds(schema_editor, table)
    for name, (_before, columns, predicate) in INDEXES.items():
        _swap(schema_editor, table, name, columns, predicate)


def full(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = _table(apps, schema_editor)
    _wait_for_other_builds(schema_editor, table)
    for name, (columns, _after, _predicate) in INDEXES.items():
        _swap(schema_editor, table, name, columns, "")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("django_jobqueue", "0026_limit_keys_exact_on_mysql"),
    ]

    operations = [migrations.RunPython(partial, full, elidable=False)]
