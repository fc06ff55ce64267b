"""A job's resumable steps (docs/workflows.md "Resumable steps"), checkpointed on its row.

Nullable with no default: a worker of the previous release, which never writes it,
keeps working during a rolling deploy.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0020_batch_workflow_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="steps",
            field=models.JSONField(blank=True, null=True, verbose_name="steps"),
        ),
    ]
