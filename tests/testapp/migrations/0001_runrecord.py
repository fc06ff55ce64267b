"""Add RunRecord, the side table test job types write one row per run to."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="RunRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("jid", models.CharField(db_index=True, max_length=32)),
                ("label", models.CharField(blank=True, default="", max_length=200)),
                ("attempt", models.PositiveIntegerField(default=0)),
                ("worker", models.CharField(blank=True, default="", max_length=200)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
            ],
            options={"ordering": ["pk"]},
        ),
    ]
