"""The job table's indexes of batches and workflows (docs/workflows.md), which find a
batch's and a workflow's jobs (counts, repair, the console). Built outside the
model's ``Meta``, as ``0004``'s:

- PostgreSQL: partial (``WHERE batch_id IS NOT NULL``), so a job of no batch and no
  workflow writes no entry to them; built ``CONCURRENTLY``, so a live table keeps
  taking writes while they build (hence this migration runs outside a transaction,
  apart from ``0019``'s schema changes).
- SQLite: partial too (SQLite has partial indexes).
- MySQL/MariaDB: plain, as MySQL has no partial index (a ``condition`` in ``Meta``
  would warn there, models.W037); built in place (InnoDB's online DDL).
"""

from typing import Any

from django.db import migrations

#: (index name, column) of the job table's indexes built here.
INDEXES = (("jq_job_batch_idx", "batch_id"), ("jq_job_workflow_idx", "workflow_id"))


def _mysql_indexes(schema_editor: Any, table: str) -> set[str]:
    with schema_editor.connection.cursor() as cursor:
        return {
            index
            for index, info in schema_editor.connection.introspection.get_constraints(
                cursor, table
            ).items()
            if info["index"]
        }


def create_indexes(apps: Any, schema_editor: Any) -> None:
    job = apps.get_model("django_jobqueue", "Job")
    quote = schema_editor.quote_name
    vendor = schema_editor.connection.vendor
    table = quote(job._meta.db_table)
    for name, column in INDEXES:
        columns = f"({quote(column)}, {quote('status')})"
        if vendor == "postgresql":
            schema_editor.execute(
                f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(name)} ON {table} "
                f"{columns} WHERE {quote(column)} IS NOT NULL"
            )
        elif vendor == "sqlite":
            schema_editor.execute(
                f"CREATE INDEX IF NOT EXISTS {quote(name)} ON {table} "
                f"{columns} WHERE {quote(column)} IS NOT NULL"
            )
        elif name not in _mysql_indexes(schema_editor, job._meta.db_table):  # no IF NOT EXISTS
            schema_editor.execute(f"CREATE INDEX {quote(name)} ON {table} {columns}")


def drop_indexes(apps: Any, schema_editor: Any) -> None:
    job = apps.get_model("django_jobqueue", "Job")
    quote = schema_editor.quote_name
    vendor = schema_editor.connection.vendor
    for name, _column in INDEXES:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {quote(name)}")
        elif vendor == "sqlite":
            schema_editor.execute(f"DROP INDEX IF EXISTS {quote(name)}")
        else:
            schema_editor.execute(f"DROP INDEX {quote(name)} ON {quote(job._meta.db_table)}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("django_jobqueue", "0019_batches_workflows"),
    ]

    operations = [migrations.RunPython(create_indexes, drop_indexes, elidable=False)]
