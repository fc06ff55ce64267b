"""Batches, workflows and dependencies (docs/workflows.md).

Three tables (``Batch``, ``Workflow``, ``Dependency``), four columns on the job
table (``batch_id``, ``workflow_id``, ``step``, ``awaited``) and the ``blocked`` status of a job
that waits for its upstream jobs (``waiting`` false: the claim never scans it).

The new columns are NULL or have a database default (``step`` "", ``awaited`` false), so adding them
rewrites no row on PostgreSQL 11+, MariaDB 10.3+ or SQLite. The job table's two new
indexes, which find a batch's and a workflow's jobs (counts, repair, the console),
are built outside the model's ``Meta``, as ``0004``'s:

- PostgreSQL: partial (``WHERE batch_id IS NOT NULL``), so a job of no batch and no
  workflow writes no entry to them; built ``CONCURRENTLY``, so a live table keeps
  taking writes while they build.
- SQLite: partial too (SQLite has partial indexes).
- MySQL/MariaDB: plain, as MySQL has no partial index (a ``condition`` in ``Meta``
  would warn there, models.W037); built in place (InnoDB's online DDL).
"""

from typing import Any

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

#: (index name, column) of the job table's indexes built here.
INDEXES = (("jq_job_batch_idx", "batch_id"), ("jq_job_workflow_idx", "workflow_id"))


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
        else:
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
        ("django_jobqueue", "0017_job_origin_index"),
    ]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("total", models.PositiveIntegerField(default=0, verbose_name="total")),
                ("done", models.PositiveIntegerField(default=0, verbose_name="done")),
                ("failed", models.PositiveIntegerField(default=0, verbose_name="failed")),
                ("cancelled", models.PositiveIntegerField(default=0, verbose_name="cancelled")),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        verbose_name="created at",
                    ),
                ),
                (
                    "finished_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="finished at"),
                ),
                (
                    "queue",
                    models.CharField(
                        blank=True, default="", max_length=100, verbose_name="callbacks' queue"
                    ),
                ),
                ("on_finish", models.JSONField(blank=True, null=True, verbose_name="on finish")),
                ("on_success", models.JSONField(blank=True, null=True, verbose_name="on success")),
                ("on_failure", models.JSONField(blank=True, null=True, verbose_name="on failure")),
                ("sealed", models.BooleanField(default=False, verbose_name="sealed")),
                (
                    "finish_jid",
                    models.CharField(
                        blank=True, default="", max_length=32, verbose_name="on finish job"
                    ),
                ),
                (
                    "success_jid",
                    models.CharField(
                        blank=True, default="", max_length=32, verbose_name="on success job"
                    ),
                ),
                (
                    "failure_jid",
                    models.CharField(
                        blank=True, default="", max_length=32, verbose_name="on failure job"
                    ),
                ),
            ],
            options={
                "verbose_name": "batch",
                "verbose_name_plural": "batches",
                "indexes": [
                    models.Index(fields=["finished_at", "sealed"], name="jq_batch_open_idx")
                ],
            },
        ),
        migrations.CreateModel(
            name="Workflow",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("total", models.PositiveIntegerField(default=0, verbose_name="total")),
                ("done", models.PositiveIntegerField(default=0, verbose_name="done")),
                ("failed", models.PositiveIntegerField(default=0, verbose_name="failed")),
                ("cancelled", models.PositiveIntegerField(default=0, verbose_name="cancelled")),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        verbose_name="created at",
                    ),
                ),
                (
                    "finished_at",
                    models.DateTimeField(blank=True, null=True, verbose_name="finished at"),
                ),
                ("name", models.CharField(max_length=200, verbose_name="name")),
                (
                    "on_upstream_failure",
                    models.CharField(
                        default="cancel", max_length=8, verbose_name="on upstream failure"
                    ),
                ),
            ],
            options={
                "verbose_name": "workflow",
                "verbose_name_plural": "workflows",
                "indexes": [
                    models.Index(fields=["name", "created_at"], name="jq_workflow_name_idx"),
                    models.Index(fields=["finished_at"], name="jq_workflow_open_idx"),
                ],
            },
        ),
        migrations.AddField(
            model_name="job",
            name="step",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=200, verbose_name="step"
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="awaited",
            field=models.BooleanField(
                db_default=False, default=False, editable=False, verbose_name="awaited"
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("init", "init"),
                    ("processing", "processing"),
                    ("retry", "retry"),
                    ("error", "error"),
                    ("max_retry", "max retry"),
                    ("done", "done"),
                    ("cancelled", "cancelled"),
                    ("blocked", "blocked"),
                ],
                default="init",
                max_length=16,
                verbose_name="status",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="batch",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="jobs",
                to="django_jobqueue.batch",
                verbose_name="batch",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="workflow",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="jobs",
                to="django_jobqueue.workflow",
                verbose_name="workflow",
            ),
        ),
        migrations.CreateModel(
            name="Dependency",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "policy",
                    models.CharField(
                        default="cancel", max_length=8, verbose_name="on upstream failure"
                    ),
                ),
                ("state", models.CharField(default="pending", max_length=8, verbose_name="state")),
                (
                    "dependent",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="django_jobqueue.job",
                    ),
                ),
                (
                    "upstream",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.DO_NOTHING,
                        related_name="+",
                        to="django_jobqueue.job",
                    ),
                ),
            ],
            options={
                "verbose_name": "dependency",
                "verbose_name_plural": "dependencies",
                "indexes": [
                    models.Index(fields=["upstream", "state"], name="jq_dep_upstream_idx"),
                    models.Index(fields=["dependent", "state"], name="jq_dep_dependent_idx"),
                ],
                "constraints": [
                    models.UniqueConstraint(fields=("upstream", "dependent"), name="jq_dep_uniq")
                ],
            },
        ),
        migrations.RunPython(create_indexes, drop_indexes, elidable=False),
    ]
