"""Flow-control limits (docs/limits.md): each job's partition key (``Job.limit_key``),
the limits set at run time (``LimitOverride``) and the per-(target, key) rows a
limited claim locks and keeps its token bucket in (``LimitState``).

``limit_key`` has a database default, so the previous release's workers and
producers, which do not know the column, keep inserting and claiming during a
rolling deploy.
"""

import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0017_job_origin_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="limit_key",
            field=models.CharField(
                blank=True, db_default="", default="", max_length=200, verbose_name="limit key"
            ),
        ),
        migrations.CreateModel(
            name="LimitOverride",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("target", models.CharField(max_length=210, unique=True, verbose_name="target")),
                ("concurrency", models.PositiveIntegerField(blank=True, null=True, verbose_name="concurrency")),
                ("rate", models.CharField(blank=True, default="", max_length=32, verbose_name="rate")),
                ("burst", models.PositiveIntegerField(blank=True, null=True, verbose_name="burst")),
                ("partition", models.CharField(blank=True, default="", max_length=200, verbose_name="partition")),
                ("fair", models.BooleanField(default=False, verbose_name="fair")),
                ("set_by", models.CharField(blank=True, default="", max_length=200, verbose_name="set by")),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(), verbose_name="updated at"
                    ),
                ),
            ],
            options={
                "verbose_name": "limit override",
                "verbose_name_plural": "limit overrides",
            },
        ),
        migrations.CreateModel(
            name="LimitState",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("target", models.CharField(max_length=210, verbose_name="target")),
                ("limit_key", models.CharField(blank=True, default="", max_length=200, verbose_name="limit key")),
                ("tokens", models.FloatField(default=0.0, verbose_name="tokens")),
                ("refilled_at", models.DateTimeField(blank=True, null=True, verbose_name="refilled at")),
            ],
            options={
                "verbose_name": "limit state",
                "verbose_name_plural": "limit states",
                "constraints": [
                    models.UniqueConstraint(fields=("target", "limit_key"), name="jq_limit_state_uniq")
                ],
            },
        ),
    ]
