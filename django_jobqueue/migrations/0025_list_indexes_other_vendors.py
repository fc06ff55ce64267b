"""Indexes for the console's searches, lists and counts beyond PostgreSQL's (0023, 0024).

bench/console_pages.py at 1,000,000 jobs (docs/console.md "Speed at a million jobs")
found MariaDB reading every job for pages PostgreSQL answers over its partial
indexes, which MariaDB lacks:

- ``jq_job_waiting_idx`` on MariaDB: ``(waiting, id)``, the waiting jobs in id order
  (PostgreSQL's of the same name, 0024, holds the waiting ids alone). The list of
  waiting jobs, newest first, read the primary key backwards through the finished
  work to find a backlog. Every job has an entry; an enqueue writes one, a claim
  moves it (as the claim indexes, which ``waiting`` also leads).
- ``jq_job_status_queue_idx`` on MariaDB: ``(status, queue)``. The overview's and
  ``/metrics/``' counts of running jobs and dead letters per queue looked each row
  up for its queue; over this index they read index entries alone. Each change of
  status moves an entry (as the status indexes do).
- ``jq_job_id_hash_idx``: the held ids' hashes, for a search by id (a bare word is a
  jid, a held id or a primary key: :mod:`django_jobqueue.store.jobfilter`). The
  unique ``(queue, job_id_hash)`` index cannot find a hash without its queue.
  PostgreSQL and SQLite hold the held ids alone (``WHERE job_id_hash IS NOT NULL``,
  which both match to ``job_id_hash = ...``), so a job without an id writes nothing;
  MariaDB holds every job, NULL for most.

SQLite's waiting jobs need no index: the filter tells its planner they are few
(:func:`django_jobqueue.store.states.is_waiting`). MariaDB builds its indexes online
(InnoDB adds an index without blocking writes), PostgreSQL ``CONCURRENTLY``, hence
this migration runs outside a transaction.
"""

from typing import Any

from django.db import migrations

#: vendor -> (name, columns, predicate or "") of the indexes made there.
INDEXES: dict[str, list[tuple[str, tuple[str, ...], str]]] = {
    "mysql": [
        ("jq_job_waiting_idx", ("waiting", "id"), ""),
        ("jq_job_status_queue_idx", ("status", "queue"), ""),
        ("jq_job_id_hash_idx", ("job_id_hash",), ""),
    ],
    "sqlite": [("jq_job_id_hash_idx", ("job_id_hash",), "job_id_hash IS NOT NULL")],
    "postgresql": [("jq_job_id_hash_idx", ("job_id_hash",), "job_id_hash IS NOT NULL")],
}


def create(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    quote = schema_editor.quote_name
    table = quote(apps.get_model("django_jobqueue", "Job")._meta.db_table)
    for name, columns, predicate in INDEXES.get(vendor, []):
        where = f" WHERE {predicate}" if predicate else ""
        if vendor == "mysql" and _exists(schema_editor, table, name):
            continue  # MySQL has no CREATE INDEX IF NOT EXISTS (MariaDB has)
        how = {"postgresql": "CONCURRENTLY IF NOT EXISTS ", "sqlite": "IF NOT EXISTS "}
        schema_editor.execute(
            f"CREATE INDEX {how.get(vendor, '')}{quote(name)} ON {table} "
            f"({', '.join(quote(c) for c in columns)}){where}"
        )


def drop(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    quote = schema_editor.quote_name
    table = quote(apps.get_model("django_jobqueue", "Job")._meta.db_table)
    for name, _columns, _predicate in INDEXES.get(vendor, []):
        if vendor == "mysql":
            if _exists(schema_editor, table, name):
                schema_editor.execute(f"DROP INDEX {quote(name)} ON {table}")
        elif vendor == "postgresql":
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(name)}")
        else:
            schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")


def _exists(schema_editor: Any, table: str, name: str) -> bool:
    """Whether MySQL/MariaDB's ``table`` (quoted) has an index ``name``."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SHOW INDEX FROM {table} WHERE Key_name = %s", [name])  # noqa: S608
        return bool(cursor.fetchall())


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY (PostgreSQL) runs outside a transaction

    dependencies = [
        ("django_jobqueue", "0024_job_list_indexes"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
