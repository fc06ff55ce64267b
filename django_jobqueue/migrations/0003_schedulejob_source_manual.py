# A plan made by hand (the admin) must not default to source "code": the sync on
# foreman start retires "code" plans that no @job declares.

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('django_jobqueue', '0002_job_hold_durations'),
    ]

    operations = [
        migrations.AlterField(
            model_name='schedulejob',
            name='source',
            field=models.CharField(default='manual', max_length=16, verbose_name='source'),
        ),
    ]
