"""Batches, workflows and dependencies (docs/workflows.md).

Three tables (``Batch``, ``Workflow``, ``Dependency``), four columns on the job
table (``batch_id``, ``workflow_id``, ``step``, ``awaited``) and the ``blocked`` status of a job
that waits for its upstream jobs (``waiting`` false: the claim never scans it).

The new columns are NULL or have a database default (``step`` "", ``awaited`` false),
so adding them rewrites no row on PostgreSQL 11+ or MariaDB 10.3+ (Django's SQLite
schema editor copies the table for a NOT NULL column). The job table's indexes of
batches and workflows are ``0020``'s, built outside a transaction.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0018_job_limits"),
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
    ]
