"""A gateway worker's name belongs to the token that registered it.

``Worker.owner_token``: the token whose ``POST /sdk/worker/register`` made the row.
Another token may not re-register, claim as or stop that worker unless it has the
``admin`` scope on each of the worker's queues (docs/gateway.md "Worker names").
Existing rows get None: the next token to register such a gateway name owns it.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0006_job_lean_indexes"),
    ]

    operations = [
        migrations.AddField(
            model_name="worker",
            name="owner_token",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="django_jobqueue.apitoken",
                verbose_name="registered by token",
            ),
        ),
    ]
