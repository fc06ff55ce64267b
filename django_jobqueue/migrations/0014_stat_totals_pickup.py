"""Cumulative job totals (JobTotal) and pickup-latency counters on both stats tables.

JobTotal holds, per (queue, job type), every counter JobStat holds per minute, added
by the same upsert and never pruned: the Prometheus counters only go up
(docs/metrics.md). Existing installs start it from the sums of the JobStat rows
still kept, so the counters continue from what the endpoint showed before.
"""

from typing import Any

from django.db import migrations, models
from django.db.models import Sum

_COUNTERS = (
    "done",
    "failed",
    "retried",
    "deduplicated",
    "duration_ms_sum",
    "le_10",
    "le_100",
    "le_1000",
    "le_10000",
    "le_60000",
    "le_300000",
    "le_inf",
)


def seed_totals(apps: Any, schema_editor: Any) -> None:
    """Start each (queue, job type)'s totals from the sums of its kept JobStat rows."""
    using = schema_editor.connection.alias
    JobStat = apps.get_model("django_jobqueue", "JobStat")
    JobTotal = apps.get_model("django_jobqueue", "JobTotal")
    sums = (
        JobStat.objects.using(using)
        .order_by()
        .values("queue", "job_type")
        .annotate(**{f"s_{name}": Sum(name) for name in _COUNTERS})
    )
    JobTotal.objects.using(using).bulk_create(
        [
            JobTotal(
                queue=row["queue"],
                job_type=row["job_type"],
                **{name: row[f"s_{name}"] or 0 for name in _COUNTERS},
            )
            for row in sums
        ],
        batch_size=500,
    )


def drop_totals(apps: Any, schema_editor: Any) -> None:
    """Nothing to undo: the table itself goes with the reversed CreateModel."""


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0011_worker_owner_token"),
    ]

    operations = [
        migrations.AddField(
            model_name="jobstat",
            name="pickup_le_100",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="jobstat",
            name="pickup_le_1000",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="jobstat",
            name="pickup_le_10000",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="jobstat",
            name="pickup_le_300000",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="jobstat",
            name="pickup_le_3600000",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="jobstat",
            name="pickup_le_60000",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="jobstat",
            name="pickup_le_inf",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="jobstat",
            name="pickup_ms_sum",
            field=models.PositiveBigIntegerField(default=0, verbose_name="pickup latency sum (ms)"),
        ),
        migrations.CreateModel(
            name="JobTotal",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("done", models.PositiveBigIntegerField(default=0, verbose_name="done")),
                ("failed", models.PositiveBigIntegerField(default=0, verbose_name="failed")),
                ("retried", models.PositiveBigIntegerField(default=0, verbose_name="retried")),
                (
                    "deduplicated",
                    models.PositiveBigIntegerField(default=0, verbose_name="deduplicated"),
                ),
                (
                    "duration_ms_sum",
                    models.PositiveBigIntegerField(default=0, verbose_name="duration sum (ms)"),
                ),
                ("le_10", models.PositiveBigIntegerField(default=0)),
                ("le_100", models.PositiveBigIntegerField(default=0)),
                ("le_1000", models.PositiveBigIntegerField(default=0)),
                ("le_10000", models.PositiveBigIntegerField(default=0)),
                ("le_60000", models.PositiveBigIntegerField(default=0)),
                ("le_300000", models.PositiveBigIntegerField(default=0)),
                ("le_inf", models.PositiveBigIntegerField(default=0)),
                (
                    "pickup_ms_sum",
                    models.PositiveBigIntegerField(
                        default=0, verbose_name="pickup latency sum (ms)"
                    ),
                ),
                ("pickup_le_100", models.PositiveBigIntegerField(default=0)),
                ("pickup_le_1000", models.PositiveBigIntegerField(default=0)),
                ("pickup_le_10000", models.PositiveBigIntegerField(default=0)),
                ("pickup_le_60000", models.PositiveBigIntegerField(default=0)),
                ("pickup_le_300000", models.PositiveBigIntegerField(default=0)),
                ("pickup_le_3600000", models.PositiveBigIntegerField(default=0)),
                ("pickup_le_inf", models.PositiveBigIntegerField(default=0)),
                ("queue", models.CharField(max_length=100, verbose_name="queue")),
                ("job_type", models.CharField(max_length=200, verbose_name="job type")),
            ],
            options={
                "verbose_name": "job total",
                "verbose_name_plural": "job totals",
                "constraints": [
                    models.UniqueConstraint(fields=("queue", "job_type"), name="jq_total_uniq")
                ],
            },
        ),
        migrations.RunPython(seed_totals, drop_totals),
    ]
