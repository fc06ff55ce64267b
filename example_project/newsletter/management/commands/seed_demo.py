"""Enqueue the demo's workload through the same code paths as the site."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand

from django_jobqueue.models import Job

from ...models import Issue, Subscriber
from ...services import AlreadySubscribed, subscribe
from ...tasks import send_test_copy


def _count(value: str) -> int:
    number = int(value)
    if number < 0:
        raise argparse.ArgumentTypeError(f"expected a count >= 0, got {value}")
    return number


class Command(BaseCommand):
    help = (
        "Sign up --subscribers new demo subscribers (each enqueues a welcome mail, as the "
        "sign-up view does) and publish --issues new issues: each gets a test copy through "
        "a Django @task, then an announcement through the post_save signal, which fans "
        "out one delivery job per subscriber when it runs."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--subscribers", type=_count, default=50, help="New subscribers (default %(default)r)."
        )
        parser.add_argument(
            "--issues", type=_count, default=2, help="Issues to publish (default %(default)r)."
        )

    def handle(self, *args: Any, subscribers: int, issues: int, **options: Any) -> None:
        before = Job.objects.count()
        first = Subscriber.objects.filter(email__startswith="reader-").count() + 1
        added = 0
        number = first
        while added < subscribers:
            try:
                subscribe(f"reader-{number:05d}@example.com", f"Reader {number}")
            except AlreadySubscribed:
                pass
            else:
                added += 1
            number += 1
        first_issue = Issue.objects.count() + 1
        for number in range(first_issue, first_issue + issues):
            issue = Issue(
                title=f"Issue #{number}: news from the job queue",
                body=f"Issue {number}. Every copy of this mail was sent by a background job.\n",
            )
            issue.save()
            # The editors' proof copy, through Django's @task API (TASKS backend).
            send_test_copy.enqueue(issue.pk, "editors@example.com")
            issue.publish()
        self.stdout.write(
            f"seed_demo: signed up {added} subscriber(s), published {issues} issue(s); "
            f"{Job.objects.count() - before} job(s) enqueued (the announcements fan out "
            f"{issues} x {Subscriber.objects.count()} deliveries when they run)."
        )
