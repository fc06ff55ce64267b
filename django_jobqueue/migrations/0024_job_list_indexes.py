"""Indexes that give the console's job lists their order, on PostgreSQL.

The console lists jobs newest first by primary key (``ORDER BY id DESC``, keyset
pages). Filtered by a state, and by a queue, PostgreSQL read the primary key backwards
and filtered each row: quick while the matching jobs are among the newest, but a
backlog of waiting jobs older than the work done since (a queue paused or starved
while others ran), or a queue with no running job or no dead letter at all, made it
read every row of the table (bench/console_pages.py at 1,000,000 jobs:
docs/console.md "Speed"). Over these indexes the list reads its page and stops.

- ``jq_job_waiting_idx`` (new): the waiting jobs' ids, ``WHERE waiting``. An enqueue
  (and a retry) writes one entry; a claim none (the claimed row is not waiting).
- ``jq_job_running_idx`` (0023) and ``jq_job_dead_idx`` (0004) become ``(queue, id)``
  instead of ``(queue)``, under the same names and predicates: the same rows (a
  claim, a dead letter writes one entry, as before), the counts per queue still
  index-only scans, and a queue's running jobs and dead letters read in id order.
  Each new index is built first, then the old one dropped and the new one renamed.

All are built ``CONCURRENTLY``, so a live table keeps taking writes; hence this
migration runs outside a transaction. PostgreSQL only, as 0004 and 0023: MySQL has no
partial index, and SQLite does not match a partial index to a filter whose value is a
bound parameter (``waiting = ?``, as Django writes it).
"""

from typing import Any

from django.db import migrations

WAITING = "jq_job_waiting_idx"
#: (name, predicate) of the partial indexes that gain ``id``.
BY_QUEUE = (
    ("jq_job_running_idx", "status = 'processing'"),
    ("jq_job_dead_idx", "status IN ('error', 'max_retry')"),
)


def _swap(schema_editor: Any, table: str, name: str, columns: str, predicate: str) -> None:
    """Make index ``name`` be ``columns WHERE predicate``: build, drop the old, rename."""
    quote = schema_editor.quote_name
    building = f"{name}_new"
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(building)} ON {table} {columns} "
        f"WHERE {predicate}"
    )
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(name)}")
    schema_editor.execute(f"ALTER INDEX {quote(building)} RENAME TO {quote(name)}")


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    table = quote(apps.get_model("django_jobqueue", "Job")._meta.db_table)
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(WAITING)} "
        f"ON {table} ({quote('id')}) WHERE {quote('waiting')}"
    )
    for name, predicate in BY_QUEUE:
        _swap(schema_editor, table, name, f"({quote('queue')}, {quote('id')})", predicate)


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    table = quote(apps.get_model("django_jobqueue", "Job")._meta.db_table)
    for name, predicate in BY_QUEUE:
        _swap(schema_editor, table, name, f"({quote('queue')})", predicate)
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(WAITING)}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("django_jobqueue", "0023_operator_indexes"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
