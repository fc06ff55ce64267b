from __future__ import annotations

from django.apps import AppConfig


class TestAppConfig(AppConfig):
    """App config of the test suite's own models and job types."""

    name = "tests.testapp"
    label = "testapp"
    default_auto_field = "django.db.models.BigAutoField"
