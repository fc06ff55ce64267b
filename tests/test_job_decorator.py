"""``@job`` written as a new user might write it (README "Quickstart").

``@job`` without its name used to return the inner decorator in place of the handler:
nothing was registered, and the mistake showed later as an ``AttributeError`` on
``.enqueue`` far from its cause. It is refused at once, with the fix in the message; so
is a handler the worker cannot call as ``handler(payload, ctx)``, whose every attempt
would fail.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.test import override_settings

from django_jobqueue import enqueue_job, job
from django_jobqueue.core.exceptions import ImproperlyConfiguredJobQueue, UnknownJobType
from django_jobqueue.core.validation import MAX_INT
from django_jobqueue.models import Job
from django_jobqueue.store import registry
from django_jobqueue.store.registry import get_job_description

pytestmark = pytest.mark.django_db


def test_job_without_its_name__is_refused_at_once_with_the_fix() -> None:
    with pytest.raises(ImproperlyConfiguredJobQueue, match=r'write @job\("app\.send_receipt"\)'):

        @job  # type: ignore[arg-type]
        def send_receipt(payload, ctx):
            return None


@pytest.mark.parametrize("name", [None, 42, b"bytes.name"])
def test_job_with_a_name_that_is_not_a_string__is_refused(name: object) -> None:
    with pytest.raises(ImproperlyConfiguredJobQueue, match="a string: got"):
        job(name)  # type: ignore[arg-type]


def test_job_with_its_name__registers_and_enqueues(monkeypatch: pytest.MonkeyPatch) -> None:
    # A copy of the registry, so the type declared here leaves with the test; the
    # apps' jobs modules are discovered first, or they would land in the copy alone.
    registry._autodiscover()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))

    @job("decorator.named")
    def named(payload, ctx):
        return None

    assert get_job_description("decorator.named") is named.description
    jid = named.enqueue({"x": 1})["jid"]
    assert Job.objects.get(jid=jid).job_type == "decorator.named"


@pytest.mark.parametrize(
    "handler",
    [
        lambda payload: None,
        lambda: None,
        lambda payload, ctx, extra: None,
        lambda *, payload, ctx: None,
    ],
    ids=["one-argument", "no-argument", "a-third-required", "keyword-only"],
)
def test_a_handler_the_worker_cannot_call_as_payload_ctx__is_refused_at_once(handler) -> None:
    with pytest.raises(ImproperlyConfiguredJobQueue, match=r"is called as .*\(payload, ctx\)"):
        job("decorator.wrong_signature")(handler)
    with pytest.raises(UnknownJobType):
        get_job_description("decorator.wrong_signature")  # nothing was registered


@pytest.mark.parametrize(
    "handler",
    [
        lambda payload, ctx: None,
        lambda payload, ctx, extra=1: None,
        lambda *args: None,
        lambda payload, *rest, **options: None,
    ],
    ids=["two", "a-third-with-default", "star-args", "star-rest"],
)
def test_a_handler_callable_as_payload_ctx__is_accepted(handler, monkeypatch) -> None:
    registry._autodiscover()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    handle = job("decorator.fine_signature")(handler)
    assert get_job_description("decorator.fine_signature") is handle.description


def test_job_of_something_not_callable__is_refused() -> None:
    with pytest.raises(ImproperlyConfiguredJobQueue, match="decorates a function"):
        job("decorator.not_callable")(42)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"timeout": "30d"},
            "timeout must be at most 2,147,483,647 ms (24.8 days): got 2,592,000,000 ms",
        ),
        (
            {"priority": 2**31},
            "priority must be an integer from 1 to 2,147,483,647: got 2147483648",
        ),
        ({"max_retry": 10**20}, "max_retry must be an integer from 0 to 2,147,483,647"),
        ({"concurrent": 2**31}, "concurrent must be an integer from 1 to 2,147,483,647"),
    ],
    ids=["timeout", "priority", "max_retry", "concurrent"],
)
def test_an_option_past_a_32_bit_column__is_refused_at_once(options, message) -> None:
    """A job type's ``timeout="30d"`` passed, and every enqueue of it then failed in the
    database (``integer out of range``: a DataError, a 500 at the gateway)."""
    with pytest.raises(ImproperlyConfiguredJobQueue, match=re.escape(message)):
        job("decorator.too_large", **options)(lambda payload, ctx: None)
    with pytest.raises(UnknownJobType):
        get_job_description("decorator.too_large")  # nothing was registered


def test_a_job_type_in_settings_with_a_30_day_timeout__is_a_typed_error_not_a_database_one():
    """Declared in ``JOBQUEUE["JOB_TYPES"]``, the type is described at its first use: its
    enqueue raises the settings error (it was the database's ``integer out of range``)
    and writes nothing."""
    declared = {
        "settings.long": {"handler": "tests.testapp.jobtypes.worker.record_run", "timeout": "30d"}
    }
    with override_settings(JOBQUEUE={"JOB_TYPES": declared}):
        with pytest.raises(ImproperlyConfiguredJobQueue, match="'settings.long': timeout must"):
            enqueue_job("default", "settings.long", {})
    assert not Job.objects.filter(job_type="settings.long").exists()


def test_the_largest_timeout__enqueues_and_is_stored(monkeypatch) -> None:
    registry._autodiscover()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    handle = job("decorator.longest", timeout=timedelta(milliseconds=MAX_INT))(
        lambda payload, ctx: None
    )
    jid = handle.enqueue({})["jid"]
    assert Job.objects.get(jid=jid).timeout_ms == MAX_INT
