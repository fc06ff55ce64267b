"""Publishing an issue enqueues its announcement, in the transaction of the save."""

from __future__ import annotations

from typing import Any

from django.db.models.signals import post_save
from django.dispatch import receiver

from .jobs import announce_issue
from .models import Issue

#: The announcement's unique key is held for a week: saving a published issue again
#: within that time enqueues nothing new.
ANNOUNCE_UNIQUE_TTL_MS = 7 * 86_400_000


@receiver(post_save, sender=Issue, dispatch_uid="newsletter.announce_published_issue")
def announce_published_issue(
    sender: type[Issue], instance: Issue, created: bool, raw: bool, **kwargs: Any
) -> None:
    """Enqueue ``newsletter.announce_issue`` when a published issue is saved.

    ``post_save`` runs inside the caller's transaction (``Issue.publish()`` and the
    admin open one), so the job commits or rolls back with the issue.
    """
    if raw or not instance.published or instance.announce_jid:
        return
    result = announce_issue.enqueue(
        {"issue_id": instance.pk},
        unique_key=f"announce:{instance.pk}",
        unique_ttl_ms=ANNOUNCE_UNIQUE_TTL_MS,
    )
    instance.announce_jid = result.jid
    Issue.objects.filter(pk=instance.pk).update(announce_jid=result.jid)
