"""Subscribers and the issues they receive."""

from __future__ import annotations

from typing import Any

from django.db import models, transaction
from django.utils import timezone


class Subscriber(models.Model):
    """Someone who signed up; a welcome mail job is enqueued with the row."""

    email = models.EmailField(unique=True)
    name = models.CharField(max_length=100, blank=True, default="")
    subscribed_at = models.DateTimeField(auto_now_add=True)
    #: The jid of the welcome mail job enqueued in the sign-up's transaction.
    welcome_jid = models.CharField(max_length=32, blank=True, default="")
    #: Set by the welcome mail job when the mail went out.
    welcomed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-subscribed_at"]

    def __str__(self) -> str:
        return self.email


class Issue(models.Model):
    """One issue of the newsletter; publishing it enqueues its announcement (signal)."""

    title = models.CharField(max_length=200)
    body = models.TextField(blank=True, default="")
    published = models.BooleanField(default=False)
    published_at = models.DateTimeField(null=True, blank=True)
    #: The jid of the job that mails this issue to every subscriber.
    announce_jid = models.CharField(max_length=32, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.title

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Save; a published issue gets its ``published_at`` if it has none."""
        if self.published and self.published_at is None:
            self.published_at = timezone.now()
        super().save(*args, **kwargs)

    def publish(self) -> None:
        """Publish the issue; the announcement job commits with it (post_save signal)."""
        with transaction.atomic():
            self.published = True
            self.save()


class Delivery(models.Model):
    """One issue mailed to one subscriber (written by the delivery job)."""

    issue = models.ForeignKey(Issue, on_delete=models.CASCADE, related_name="deliveries")
    subscriber = models.ForeignKey(Subscriber, on_delete=models.CASCADE, related_name="deliveries")
    sent_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "deliveries"
        constraints = [
            models.UniqueConstraint(fields=["issue", "subscriber"], name="newsletter_delivery_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.issue} -> {self.subscriber}"
