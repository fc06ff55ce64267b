"""A partial index of the running jobs per queue, on PostgreSQL.

The console's overview, ``/metrics/`` and ``jobqueue status`` count the running jobs
per queue (``status = 'processing' GROUP BY queue``). Over the lease index that
count reads every running row's heap page for its queue (about 20,000 pages for
20,000 running jobs among 1,000,000); over this index, which holds the running rows
alone and their queue, it is an index-only scan. A claim writes to it (the row turns
``processing``), an enqueue does not.

PostgreSQL only, and outside the model's ``Meta``, as ``jq_job_dead_idx``
(migration 0004): MySQL has no partial index (a ``condition`` in ``Meta`` warns
there, models.W037), and the speed target is PostgreSQL's. It is built
``CONCURRENTLY``, so a live table keeps taking writes.
"""

from typing import Any

from django.db import migrations

INDEX = "jq_job_running_idx"


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    job = apps.get_model("django_jobqueue", "Job")
    quote = schema_editor.quote_name
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(INDEX)} "
        f"ON {quote(job._meta.db_table)} ({quote('queue')}) "
        "WHERE status = 'processing'"
    )


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(INDEX)}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("django_jobqueue", "0021_job_steps"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
