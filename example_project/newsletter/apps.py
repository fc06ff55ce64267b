"""App configuration of the newsletter app."""

from __future__ import annotations

from django.apps import AppConfig


class NewsletterConfig(AppConfig):
    """The example's newsletter app; ``ready()`` connects its signal receivers."""

    name = "example_project.newsletter"
    label = "newsletter"
    verbose_name = "Newsletter"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the post_save receiver)
