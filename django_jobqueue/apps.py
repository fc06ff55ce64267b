"""App configuration."""

from __future__ import annotations

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.utils.translation import gettext_lazy as _

from .store.registry import register_job_type_resolver


class JobQueueConfig(AppConfig):
    """django-jobqueue's app. The label ``django_jobqueue`` is in every table name."""

    name = "django_jobqueue"
    label = "django_jobqueue"
    verbose_name = _("Job queue")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the system checks, the signal receivers and the task job types.

        Runs in every process that sets Django up, worker processes included, so a
        task's module path resolves to its job type wherever a job is looked up.
        """
        # deferred: as Django advises for receivers and checks, importing the app
        # config (during app loading) must not register anything.
        from . import checks  # noqa: F401  (registers the system checks)
        from .core import (
            dbclock,
            signals,  # noqa: F401  (connects the receivers)
        )

        dbclock.connect()  # SQLite: the microsecond clock of dbclock.Now
        from .gateway.jobtypes import external_job_description  # no django-ninja needed

        register_job_type_resolver(external_job_description)
        # deferred: the tasks framework (or its backport) loads once apps are ready.
        try:
            from .tasks import task_job_description
        except ImproperlyConfigured:  # no tasks framework: Django 5.2 without the backport
            return
        register_job_type_resolver(task_job_description)
