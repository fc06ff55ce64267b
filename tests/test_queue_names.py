"""One queue-name rule (docs/gateway.md "Queue names") on every entry point.

The Python API, job type declarations, ``django.tasks`` and the settings refuse a
name with ``/``, ``\\``, a control character, or ``.``/``..``, and say the rule;
nothing is written. Names the rule allows (spaces, ``%``, ``?``, ``#``, unicode,
100 characters) are enqueued and claimed as given.
"""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobqueue import JobDescription, enqueue_job
from django_jobqueue.core.conf import validate_settings
from django_jobqueue.core.exceptions import ImproperlyConfiguredJobQueue, InvalidOption
from django_jobqueue.core.validation import QUEUE_NAME_RULE
from django_jobqueue.models import Job
from django_jobqueue.store.registry import validate

pytestmark = pytest.mark.django_db

REFUSED = ["reports/daily", "a\\b", ".", "..", "tab\tname", "del\x7f", "x" * 101, ""]
ALLOWED = ["with space", "100%", "what?", "#x", "ünïcødé ✓", "q" * 100, "..."]


@pytest.mark.parametrize("queue", REFUSED)
def test_python_api_refuses_a_name_off_the_rule(queue):
    with pytest.raises(InvalidOption) as caught:
        enqueue_job(queue, "maint.noop", {})
    assert QUEUE_NAME_RULE in str(caught.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize("queue", ALLOWED)
def test_python_api_takes_every_name_the_rule_allows(queue):
    jid = enqueue_job(queue, "maint.noop", {}).jid
    assert Job.objects.get(jid=jid).queue == queue


@pytest.mark.parametrize("queue", ["reports/daily", ".."])
def test_settings_refuse_a_name_off_the_rule(queue):
    with override_settings(JOBQUEUE={"DEFAULT_QUEUE": queue}):
        errors = validate_settings()
    assert any("DEFAULT_QUEUE" in e and QUEUE_NAME_RULE in e for e in errors), errors
    with override_settings(JOBQUEUE={"QUEUES": {queue: {"keep": "1d"}}}):
        errors = validate_settings()
    assert any("QUEUES" in e and QUEUE_NAME_RULE in e for e in errors), errors


def test_a_job_type_with_a_queue_off_the_rule_is_refused():
    with pytest.raises(ImproperlyConfiguredJobQueue, match="no '/'"):
        validate(JobDescription(name="t.slash", handler=print, queue="a/b"))


def test_django_tasks_refuse_a_queue_name_off_the_rule():
    compat = pytest.importorskip("django_jobqueue.core.compat", exc_type=ImproperlyConfigured)
    from tests.testapp.jobtypes import tasks as t

    backends = {
        "default": {
            "BACKEND": "django_jobqueue.tasks.JobQueueBackend",
            "QUEUES": ["default", "reports/daily"],
        }
    }
    with override_settings(TASKS=backends):
        with pytest.raises(compat.InvalidTask, match="no '/'"):
            t.add.using(queue_name="reports/daily")
    assert not Job.objects.exists()
