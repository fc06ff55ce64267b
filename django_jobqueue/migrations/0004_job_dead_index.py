"""A partial index of the dead letters per queue, on PostgreSQL.

The console's overview and ``/metrics/`` count dead letters per queue. Over the
status index that count reads every dead row's heap page (about 50 ms for 50,000
dead letters among 1,000,000 jobs); over this index, which holds the dead rows
alone, it is an index-only scan (about 6 ms). Only a row turning dead writes to it,
so enqueues and claims pay nothing.

PostgreSQL only, and outside the model's ``Meta``: MySQL has no partial index (a
``condition`` in ``Meta`` warns there, models.W037), and the speed target is
PostgreSQL's. It is built ``CONCURRENTLY``, so a live table keeps taking writes.
"""

from typing import Any

from django.db import migrations

INDEX = "jq_job_dead_idx"


def create(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    job = apps.get_model("django_jobqueue", "Job")
    quote = schema_editor.quote_name
    schema_editor.execute(
        f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote(INDEX)} "
        f"ON {quote(job._meta.db_table)} ({quote('queue')}) "
        "WHERE status IN ('error', 'max_retry')"
    )


def drop(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(INDEX)}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("django_jobqueue", "0003_console_stats_pauses_permissions"),
    ]

    operations = [migrations.RunPython(create, drop, elidable=False)]
