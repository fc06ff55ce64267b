"""A Django ``@task`` (Django's tasks framework), run by django-jobqueue's workers.

``TASKS["default"]`` uses ``django_jobqueue.tasks.JobQueueBackend``, so
``send_test_copy.enqueue(...)`` makes an ordinary job (its job type is this
function's dotted path) that ``runworkers`` runs, retries and shows in the admin.
"""

from __future__ import annotations

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport (extra "tasks-backport").
    from django_tasks import task

from django.core.mail import send_mail

from .models import Issue


@task(queue_name="default")
def send_test_copy(issue_id: int, email: str) -> dict[str, str]:
    """Mail one issue to an editor before it goes out (admin action "Send a test copy")."""
    issue = Issue.objects.get(pk=issue_id)
    send_mail(
        subject=f"[test copy] {issue.title}",
        message=issue.body or f"{issue.title}\n",
        from_email=None,
        recipient_list=[email],
    )
    return {"sent_to": email}
