"""A running job's progress (docs/console.md "Progress"), stored with its heartbeat.

Nullable with no default: a worker of the previous release, which never writes it,
keeps working during a rolling deploy.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0015_job_origin_audit_log"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="progress",
            field=models.JSONField(blank=True, null=True, verbose_name="progress"),
        ),
    ]
