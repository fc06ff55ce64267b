"""App configuration."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class JobQueueConfig(AppConfig):
    """django-jobqueue's app. The label ``django_jobqueue`` is in every table name."""

    name = "django_jobqueue"
    label = "django_jobqueue"
    verbose_name = _("Job queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import (
            checks,  # noqa: F401  (registers the system checks)
            dbclock,
            signals,  # noqa: F401  (connects the receivers)
        )

        dbclock.connect()  # SQLite: the microsecond clock of dbclock.Now
