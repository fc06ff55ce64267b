"""Who enqueued a job, and the audit log of operators' actions (docs/console.md).

``Job.origin``: a short text stamped at creation (``code:<module>.<function>``,
``gateway:<token>``, ``schedule:<plan>``). It has a database default of "" so a
worker or producer of the previous release, which inserts without the column,
keeps working during a rolling deploy; existing jobs get "" (shown as unknown).
``AuditEntry``: one row per operator action, indexed by time for the newest-first
page and for pruning past ``JOBQUEUE["AUDIT_KEEP"]``.
"""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0014_stat_totals_pickup"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="origin",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=200, verbose_name="enqueued by"
            ),
        ),
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), verbose_name="at"
                    ),
                ),
                ("source", models.CharField(max_length=16, verbose_name="from")),
                (
                    "actor",
                    models.CharField(blank=True, default="", max_length=200, verbose_name="who"),
                ),
                ("action", models.CharField(max_length=32, verbose_name="action")),
                (
                    "target",
                    models.CharField(blank=True, default="", max_length=300, verbose_name="what"),
                ),
                ("count", models.PositiveIntegerField(default=0, verbose_name="how many")),
                ("detail", models.JSONField(blank=True, default=dict, verbose_name="detail")),
                ("jids", models.TextField(blank=True, default="", verbose_name="jobs")),
            ],
            options={
                "verbose_name": "audit entry",
                "verbose_name_plural": "audit log",
                "indexes": [models.Index(fields=["at"], name="jq_audit_at_idx")],
            },
        ),
    ]
