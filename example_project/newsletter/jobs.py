"""The newsletter's job types. The registry imports this module (each app's ``jobs``).

- ``newsletter.welcome``: mail a new subscriber; enqueued by the sign-up view in the
  transaction that saves the subscriber.
- ``newsletter.announce_issue``: enqueued by a ``post_save`` signal when an issue is
  published; fans out one ``newsletter.deliver_issue`` job per subscriber.
- ``newsletter.deliver_issue``: mail one issue to one subscriber through a flaky
  "mail relay" that refuses about 30 % of attempts, so retries and dead letters
  show up in the admin.
- ``newsletter.daily_digest``: mail the editors the last day's sign-ups; a periodic
  plan in ``JOBQUEUE["SCHEDULES"]`` (settings) enqueues it every morning.

Handlers run at least once (a worker that dies mid-job is retried by another), so
each one is idempotent: it checks what is already done before doing it.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.utils import timezone

from django_jobqueue import job

from .models import Delivery, Issue, Subscriber

logger = logging.getLogger(__name__)

#: Share of delivery attempts the simulated mail relay refuses.
RELAY_FAILURE_RATE = 0.3
#: A unique key of a delivery is held this long (ms): a second announcement of the
#: same issue within a week enqueues no second delivery.
DELIVERY_UNIQUE_TTL_MS = 7 * 86_400_000


class RelayUnavailable(Exception):
    """The simulated mail relay refused the message; the job is retried."""


def relay_refuses(key: str, attempt: int) -> bool:
    """Return whether the simulated relay refuses attempt ``attempt`` of ``key``.

    Deterministic (a hash, not a random number), so a demo run is reproducible:
    about :data:`RELAY_FAILURE_RATE` of the attempts are refused.
    """
    digest = hashlib.sha256(f"{key}:{attempt}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < RELAY_FAILURE_RATE


@job("newsletter.welcome", queue="emails", max_retry=5, timeout="30s")
def send_welcome(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Mail the welcome message to ``payload["subscriber_id"]``, once."""
    subscriber = Subscriber.objects.filter(pk=payload["subscriber_id"]).first()
    if subscriber is None:
        return {"skipped": "unsubscribed"}
    if subscriber.welcomed_at is not None:
        return {"skipped": "already welcomed"}
    send_mail(
        subject="Welcome to the Example Newsletter",
        message=f"Hello {subscriber.name or subscriber.email},\n\nthanks for signing up!\n",
        from_email=None,
        recipient_list=[subscriber.email],
    )
    Subscriber.objects.filter(pk=subscriber.pk).update(welcomed_at=timezone.now())
    return {"sent_to": subscriber.email}


@job("newsletter.announce_issue", queue="newsletter", max_retry=3, timeout="5m")
def announce_issue(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Enqueue one delivery job per subscriber of ``payload["issue_id"]``.

    Each delivery carries the unique key ``delivery:<issue>:<subscriber>``, so a
    second run of this job (at-least-once delivery) enqueues no duplicate.
    """
    issue = Issue.objects.filter(pk=payload["issue_id"], published=True).first()
    if issue is None:
        return {"skipped": "not published"}
    enqueued = 0
    for subscriber_id in Subscriber.objects.values_list("pk", flat=True).iterator():
        result = deliver_issue.enqueue(
            {"issue_id": issue.pk, "subscriber_id": subscriber_id},
            unique_key=f"delivery:{issue.pk}:{subscriber_id}",
            unique_ttl_ms=DELIVERY_UNIQUE_TTL_MS,
        )
        enqueued += not result.deduplicated
    return {"deliveries_enqueued": enqueued}


@job("newsletter.deliver_issue", queue="newsletter", max_retry=2, timeout="30s")
def deliver_issue(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Mail issue ``payload["issue_id"]`` to ``payload["subscriber_id"]`` via the flaky relay.

    Raises
    ------
    RelayUnavailable
        On about 30 % of attempts (deterministically); the worker retries the job
        with backoff, and after ``max_retry`` retries it becomes a dead letter.
    """
    issue_id, subscriber_id = payload["issue_id"], payload["subscriber_id"]
    if Delivery.objects.filter(issue_id=issue_id, subscriber_id=subscriber_id).exists():
        return {"skipped": "already delivered"}
    issue = Issue.objects.filter(pk=issue_id).first()
    subscriber = Subscriber.objects.filter(pk=subscriber_id).first()
    if issue is None or subscriber is None:
        return {"skipped": "issue or subscriber gone"}
    if relay_refuses(f"{issue_id}:{subscriber_id}", ctx.attempt):
        raise RelayUnavailable(
            f"The mail relay refused issue {issue_id} for {subscriber.email} "
            f"(attempt {ctx.attempt})."
        )
    send_mail(
        subject=issue.title,
        message=issue.body or f"{issue.title}\n",
        from_email=None,
        recipient_list=[subscriber.email],
    )
    Delivery.objects.get_or_create(issue_id=issue_id, subscriber_id=subscriber_id)
    return {"sent_to": subscriber.email}


@job("newsletter.daily_digest", queue="emails", max_retry=3, timeout="1m")
def daily_digest(payload: Any, ctx: Any) -> dict[str, Any]:
    """Mail the editors how many people signed up in the last 24 hours."""
    since = timezone.now() - timedelta(days=1)
    count = Subscriber.objects.filter(subscribed_at__gte=since).count()
    editors = getattr(settings, "NEWSLETTER_EDITORS", None) or ["editors@example.com"]
    send_mail(
        subject=f"Daily digest: {count} new subscriber(s)",
        message=f"{count} people signed up since {since:%Y-%m-%d %H:%M} UTC.\n",
        from_email=None,
        recipient_list=editors,
    )
    return {"new_subscribers": count}
