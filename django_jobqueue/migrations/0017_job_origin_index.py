"""An index on ``Job(origin, created_at)``: a plan's run history (its jobs, newest
first, ``schedules.plan_history``) is read over it rather than over the whole table.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0016_job_progress"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(fields=["origin", "created_at"], name="jq_job_origin_idx"),
        ),
    ]
