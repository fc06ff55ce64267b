"""The job filter language (docs/console.md "Search syntax"): each kind of term selects
what it says on every database, payload terms included; a bad term is a typed error
naming it; the CLI's ``--filter`` acts on what it selects, audited, Pro-only."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from django_jobqueue.core.validation import hold_hash
from django_jobqueue.models import AuditEntry, Job, JobStatus
from django_jobqueue.store.jobfilter import FilterError, filter_jobs, parse_filter
from tests.maintenance_helpers import make_job

pytestmark = pytest.mark.django_db


def selected(text: str) -> set[str]:
    return set(filter_jobs(Job.objects.all(), text).values_list("jid", flat=True))


@pytest.fixture
def jobs() -> dict[str, Job]:
    old = make_job(queue="mail", job_type="send", status=JobStatus.DONE)
    Job._base_manager.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=3))
    return {
        "old": old,
        "dead": make_job(
            queue="mail",
            job_type="send",
            status=JobStatus.MAX_RETRY,
            payload={"customer_id": 42, "address": {"country": "NL"}},
            errors=[{"attempt": 1, "error": "SMTP Timed out after 30 s"}],
        ),
        "string_id": make_job(
            queue="mail", job_type="bounce", status=JobStatus.ERROR, payload={"customer_id": "42"}
        ),
        "billing": make_job(
            queue="billing",
            job_type="invoice",
            status=JobStatus.INIT,
            payload={"customer_id": 7, "vip": True},
        ),
    }


def test_each_term_kind__selects_what_it_names(jobs: dict[str, Job]):
    every = {job.jid for job in jobs.values()}
    assert selected("") == every
    assert selected("queue:mail") == {jobs["old"].jid, jobs["dead"].jid, jobs["string_id"].jid}
    assert selected("queue:mail queue:billing") == every
    assert selected("type:invoice") == {jobs["billing"].jid}
    assert selected("state:failed") == {jobs["dead"].jid, jobs["string_id"].jid}
    assert selected("state:status:max_retry") == {jobs["dead"].jid}
    assert selected("since:1d") == every - {jobs["old"].jid}
    assert selected("until:1d") == {jobs["old"].jid}
    day = (timezone.now() - timedelta(days=1)).date().isoformat()
    assert selected(f"since:{day}T00:00:00Z queue:mail") == {
        jobs["dead"].jid,
        jobs["string_id"].jid,
    }
    assert selected('error:"timed OUT"') == {jobs["dead"].jid}
    assert selected(jobs["billing"].jid) == {jobs["billing"].jid}
    assert selected(str(jobs["dead"].pk)) == {jobs["dead"].jid}


def test_payload_terms__match_typed_values_on_every_database(jobs: dict[str, Job]):
    assert selected("payload.customer_id:42") == {jobs["dead"].jid}
    assert selected('payload.customer_id:"42"') == {jobs["string_id"].jid}
    assert selected("payload.address.country:NL") == {jobs["dead"].jid}
    assert selected("payload.vip:true") == {jobs["billing"].jid}
    assert selected("payload.customer_id:42 state:failed queue:mail") == {jobs["dead"].jid}
    assert selected("payload.customer_id:43") == set()


def test_bare_words__match_a_jid_a_held_id_in_any_queue_or_a_primary_key(jobs: dict[str, Job]):
    """A bare word is found by jid, by held id (its hash, in every queue that holds it)
    or as a primary key; words are alternatives, other terms still narrow them; an id
    whose hold ended (hash NULL) no longer matches."""
    held = {
        queue: make_job(queue=queue, job_id="invoice-7", job_id_hash=hold_hash("invoice-7"))
        for queue in ("mail", "billing")
    }
    make_job(queue="mail", job_id="invoice-8", job_id_hash=None)  # its hold ended
    assert selected("invoice-7") == {held["mail"].jid, held["billing"].jid}
    assert selected("invoice-7 queue:billing") == {held["billing"].jid}
    assert selected("invoice-8") == set()
    assert selected(f"invoice-7 {jobs['old'].jid} {jobs['dead'].pk}") == {
        held["mail"].jid,
        held["billing"].jid,
        jobs["old"].jid,
        jobs["dead"].jid,
    }
    assert selected(f"{jobs['old'].jid} state:failed") == set()
    assert selected("no-such-job") == set()
    assert selected("999999999") == set()


@pytest.mark.parametrize(
    ("text", "term"),
    [
        ("colour:red", "colour:red"),
        ("queue:mail state:zombie", "state:zombie"),
        ("since:yesterday", "since:yesterday"),
        ("until:2026-13-45", "until:2026-13-45"),
        ('error:"unclosed', 'error:"unclosed'),
        ("queue:", "queue:"),
        ("payload.:1", "payload.:1"),
        ("payload.a$b:1", "payload.a$b:1"),
    ],
)
def test_bad_terms__raise_a_typed_error_naming_the_term(text: str, term: str):
    with pytest.raises(FilterError) as caught:
        parse_filter(text)
    assert caught.value.term == term
    assert term in str(caught.value)
    assert caught.value.code == "invalid_filter"


@pytest.mark.parametrize("text", ["queue:a\x00b", "error:\ud800", "payload.k:\x00"])
def test_nul_and_lone_surrogates__are_refused_before_any_query(text: str):
    with pytest.raises(FilterError, match="remove that character"):
        filter_jobs(Job.objects.all(), text)


def test_too_long_filter__is_refused():
    with pytest.raises(FilterError):
        parse_filter("queue:a " * 1000)


def jobqueue(*args: Any) -> str:
    out = StringIO()
    call_command("jobqueue", *args, stdout=out)
    return out.getvalue()


def test_cli_filter__retries_cancels_deletes_what_it_selects_audited(
    jobs: dict[str, Job], pro: Any
):
    assert "Retried 1" in jobqueue("retry", "--filter", "payload.customer_id:42")
    dead = Job.objects.get(pk=jobs["dead"].pk)
    assert dead.status == JobStatus.INIT and dead.waiting
    assert Job.objects.get(pk=jobs["string_id"].pk).status == JobStatus.ERROR

    assert "Cancelled 1" in jobqueue("cancel", "--filter", "queue:billing")
    assert Job.objects.get(pk=jobs["billing"].pk).status == JobStatus.CANCELLED

    assert "Deleted 1" in jobqueue("delete", "--filter", "state:done queue:mail")
    assert not Job.objects.filter(pk=jobs["old"].pk).exists()

    audit = list(AuditEntry.objects.order_by("pk").values_list("source", "action", "count"))
    assert audit == [("cli", "retry", 1), ("cli", "cancel", 1), ("cli", "delete", 1)]
    assert "payload.customer_id=42" in AuditEntry.objects.order_by("pk").first().target


def test_cli_filter__bad_filter_names_the_term_and_changes_nothing(jobs: dict[str, Job], pro: Any):
    with pytest.raises(CommandError, match="state:zombie"):
        jobqueue("retry", "--filter", "state:zombie")
    assert not AuditEntry.objects.exists()


def test_cli_filter__needs_pro(jobs: dict[str, Job]):
    with pytest.raises(CommandError, match="Pro"):
        jobqueue("delete", "--filter", "queue:mail")
    assert Job.objects.count() == len(jobs)
