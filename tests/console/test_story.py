"""A job's whole story on its console page, the actions offered per state, the one
time format, the one table of state words, the Pro page without a licence, and the
pause of a queue that has no jobs (docs/console.md)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from django_jobqueue import enqueue_job, storage
from django_jobqueue.core.times import format_time
from django_jobqueue.models import AuditEntry, Job, JobStatus, QueuePause
from django_jobqueue.store import states
from django_jobqueue.store.workerstats import register_worker
from tests.maintenance_helpers import make_job

pytestmark = pytest.mark.django_db

OWNER = "host-a:4242:worker-1"


def url(name, *args):
    return reverse(f"django_jobqueue_console:{name}", args=args)


def text_of(html: str, element_id: str, end: str = "td|ol|p") -> str:
    """The text of the element with ``element_id`` up to the first ``end`` tag closing."""
    match = re.search(rf'id="{element_id}"[^>]*>(.*?)</({end})>', html, re.S)
    assert match, element_id
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


def run_and_fail(job: Job, *, owner: str = OWNER) -> Job:
    """Claim ``job`` as ``owner`` and fail its attempt with a real exception."""
    (claimed,) = storage.claim("default", owner=owner, queues=[job.queue])
    assert claimed.pk == job.pk
    try:
        raise ConnectionError("relay refused")
    except ConnectionError as exc:
        storage.fail(claimed, exc)
    return Job.objects.get(pk=job.pk)


def test_job_page__tells_the_whole_story(clients):
    register_worker("default", "host-a:4242", host="host-a.example", pid=4242)
    result = enqueue_job("default", "maint.noop", {"n": 1}, max_retry=1)
    job = Job.objects.get(jid=result.jid)
    assert job.origin == f"code:{__name__}.test_job_page__tells_the_whole_story"
    job = run_and_fail(job)
    assert job.status == JobStatus.RETRY
    Job.objects.filter(pk=job.pk).update(run_at=timezone.now())
    job = run_and_fail(job)
    assert job.status == JobStatus.MAX_RETRY
    assert [e["worker"] for e in job.errors] == [OWNER, OWNER]

    client = clients["permitted"]
    html = client.get(url("job", job.jid)).content.decode()
    assert text_of(html, "status") == "failed (max_retry)"
    assert "code maint" not in html
    assert f"code {__name__}.test_job_page__tells_the_whole_story" in text_of(html, "origin")
    assert text_of(html, "claimed") == f"{OWNER} on host host-a.example (runworkers)"
    assert text_of(html, "started").endswith("ago")
    assert re.search(r"\d ms|\d\.\d s", text_of(html, "duration"))
    assert html.count("ConnectionError") >= 2 and f"on {OWNER}" in html

    response = client.post(url("job_action", job.jid, "retry"), follow=True)
    html = response.content.decode()
    assert "Retried 1 dead job." in html
    assert text_of(html, "status") == "waiting (init)"
    timeline = text_of(html, "timeline")
    assert "attempt 0 started" not in timeline
    assert "retry by console permitted" in timeline
    assert timeline.index("attempt 2 failed") < timeline.index("retry by console permitted")
    actions = text_of(html, "operator-actions", "table")
    assert "permitted" in actions and "console" in actions and "retry" in actions
    entry = AuditEntry.objects.get(action="retry")
    assert (entry.source, entry.actor, entry.count, entry.jids) == (
        "console",
        "permitted",
        1,
        job.jid,
    )
    assert entry.detail == {"dead": 1, "waiting": 0}
    assert entry.target == f"job {job.jid}"


def test_timeline__to_the_millisecond_in_time_order(clients):
    created = datetime(2026, 12, 3, 11, 5, 21, 879_565, tzinfo=UTC)
    job = make_job(
        status=JobStatus.DONE,
        attempt=1,
        lease_owner=OWNER,
        started_at=created + timedelta(milliseconds=120),
        finished_at=created + timedelta(milliseconds=980),
    )
    Job.objects.filter(pk=job.pk).update(created_at=created)
    html = clients["staff"].get(url("job", job.jid)).content.decode()
    steps = re.findall(
        r'<span class="jq-when">(.*?)</span><span class="jq-what">(.*?)</span>', html
    )
    whens = [re.sub(r"<[^>]+>", "", when) for when, _ in steps]
    assert [what for _, what in steps] == [
        "enqueued by unknown (enqueued before origins were stored)",
        "attempt 1 started",
        "finished: done",
    ]
    assert whens[0].startswith("2026-12-03 11:05:21.879 UTC, ")
    assert whens[1].startswith("2026-12-03 11:05:21.999 UTC, ")
    assert whens[2].startswith("2026-12-03 11:05:22.859 UTC, ")
    assert text_of(html, "duration") == "860 ms"


def test_timeline__a_start_read_just_before_the_retry_that_made_it_follows_it():
    # The retry's audit time is the database's clock rounded to the millisecond; the
    # worker's start may read a hair earlier. What happened decides: retry, then start.
    from django_jobqueue.console.story import CLOCK_SLACK, timeline

    created = datetime(2026, 12, 3, 11, 5, 21, 0, tzinfo=UTC)
    retried_at = created + timedelta(seconds=3)
    job = make_job(
        status=JobStatus.DONE,
        attempt=1,
        started_at=retried_at - timedelta(microseconds=400),
        finished_at=retried_at - timedelta(microseconds=100),
    )
    job.created_at = created
    retry = AuditEntry(source="console", actor="ops", action="retry", count=1, at=retried_at)
    far_retry = AuditEntry(
        source="console", actor="ops", action="retry", count=1, at=created + timedelta(seconds=1)
    )
    events = [e.what for e in timeline(job, [far_retry, retry], timezone.now())]
    assert events[-3:] == ["retry by console ops", "attempt 1 started", "finished: done"]
    # A done job ran after its retry however far the clocks disagree (PostgreSQL's
    # audit time is its transaction's start, which may be long before the commit).
    job.started_at = retried_at - 40 * CLOCK_SLACK
    job.finished_at = retried_at - 30 * CLOCK_SLACK
    events = [e.what for e in timeline(job, [retry], timezone.now())]
    assert events[-3:] == ["retry by console ops", "attempt 1 started", "finished: done"]
    # A job waiting again keeps its earlier attempt's start where its clock puts it:
    # beyond the slack, before the retry that made it due.
    job.status = JobStatus.RETRY
    job.attempt = 2
    job.finished_at = None
    events = [e.what for e in timeline(job, [retry], timezone.now())]
    assert events[-2:] == ["attempt 2 started", "retry by console ops"]


ALL = {"retry", "cancel", "delete"}


@pytest.mark.parametrize(
    ("fields", "offered"),
    [
        ({"status": JobStatus.INIT}, {"cancel", "delete"}),
        ({"status": JobStatus.INIT, "run_at": timedelta(hours=1)}, {"retry", "cancel", "delete"}),
        (
            {"status": JobStatus.RETRY, "run_at": timedelta(minutes=5)},
            {"retry", "cancel", "delete"},
        ),
        ({"status": JobStatus.PROCESSING}, {"cancel"}),
        ({"status": JobStatus.PROCESSING, "cancel_requested": True}, set()),
        ({"status": JobStatus.ERROR}, {"retry", "delete"}),
        ({"status": JobStatus.MAX_RETRY}, {"retry", "delete"}),
        ({"status": JobStatus.DONE}, {"delete"}),
        ({"status": JobStatus.CANCELLED}, {"delete"}),
    ],
)
def test_job_page__offers_only_the_actions_that_apply(clients, fields, offered):
    if "run_at" in fields:
        fields = {**fields, "run_at": timezone.now() + fields["run_at"]}
    job = make_job(**fields)
    html = clients["superuser"].get(url("job", job.jid)).content.decode()
    shown = {name for name in ("retry", "cancel", "delete") if f'id="{name}"' in html}
    assert shown == offered


def test_job_action__says_what_it_did_in_a_sentence(clients):
    done = make_job(status=JobStatus.DONE)
    response = clients["superuser"].post(url("job_action", done.jid, "retry"), follow=True)
    assert b"Nothing was retried: only dead and scheduled jobs can be." in response.content
    waiting = make_job(status=JobStatus.INIT)
    response = clients["superuser"].post(url("job_action", waiting.jid, "cancel"), follow=True)
    assert b"Cancelled 1 waiting job." in response.content


def test_times__iso_to_the_second_with_the_zone_and_the_age():
    at = datetime(2026, 12, 3, 11, 5, 21, 879_565, tzinfo=UTC)
    now = at + timedelta(seconds=27, milliseconds=400)
    assert format_time(at, now=now) == "2026-12-03 11:05:21 UTC, 27 s ago"
    assert format_time(at, now=now, ms=True) == "2026-12-03 11:05:21.879 UTC, 27 s ago"
    assert format_time(None) == "-"
    with timezone.override("Europe/Paris"):
        assert format_time(at, now=now) == "2026-12-03 12:05:21 CET, 27 s ago"
    assert format_time(at, now=at - timedelta(seconds=5)) == "2026-12-03 11:05:21 UTC, in 5 s"


def test_times__the_console_lists_use_the_one_format(clients):
    job = make_job(status=JobStatus.MAX_RETRY, message="SMTPError: relay refused")
    html = clients["staff"].get(url("jobs") + "?state=failed").content.decode()
    stamp = timezone.localtime(job.created_at).strftime("%Y-%m-%d %H:%M:%S UTC, ")
    assert stamp in html
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC, \d+ s ago", html)
    assert not re.search(r"\d\d/\d\d/\d{4}", html)  # no US order anywhere
    assert "SMTPError: relay refused" in html  # the dead list's error column
    assert "failed (max_retry)" in html


def test_states__one_table_maps_every_stored_status():
    now = timezone.now()
    cases = {
        (JobStatus.INIT, 0): "waiting (init)",
        (JobStatus.INIT, 60): "scheduled (init)",
        (JobStatus.RETRY, 0): "waiting (retry)",
        (JobStatus.RETRY, 60): "scheduled (retry)",
        (JobStatus.PROCESSING, 0): "running (processing)",
        (JobStatus.ERROR, 0): "failed (error)",
        (JobStatus.MAX_RETRY, 0): "failed (max_retry)",
        (JobStatus.DONE, 0): "done",
        (JobStatus.CANCELLED, 0): "cancelled",
    }
    for (status, later_s), label in cases.items():
        job = Job(
            status=status,
            waiting=status in (JobStatus.INIT, JobStatus.RETRY),
            run_at=now + timedelta(seconds=later_s),
        )
        assert states.state_label(job, now) == label
    assert set(states.STATE_OF_STATUS) == set(JobStatus.values)
    assert set(states.STATE_OF_STATUS.values()) <= set(states.STATES)


def test_states__the_gateway_ids_console_and_table_agree(clients):
    from django_jobqueue.gateway.jobs import job_state
    from django_jobqueue.ids.pages import STATES as IDS_STATES

    assert IDS_STATES == states.STATES
    for status in JobStatus.values:
        job = make_job(status=status)
        assert job_state(job) == states.state_word(job, timezone.now())
    html = clients["staff"].get(url("jobs")).content.decode()
    for word in states.STATES:
        assert f'value="{word}"' in html  # the state filter offers the words
    assert 'value="status:max_retry"' in html  # and each stored status


def test_filters__offer_choices_and_take_old_links(clients):
    make_job(queue="mail", job_type="maint.noop", status=JobStatus.ERROR)
    make_job(queue="other", job_type="maint.noop")
    html = clients["staff"].get(url("jobs")).content.decode()
    assert re.search(r'<select name="queue"[^>]*>', html)
    assert re.search(r'<select name="job_type"[^>]*>', html)
    assert '<option value="mail">mail</option>' in html
    assert '<option value="maint.noop">maint.noop</option>' in html
    for link in ("?state=dead", "?state=failed", "?state=status:error"):
        html = clients["staff"].get(url("jobs") + link + "&queue=mail").content.decode()
        assert html.count('<tr data-status="') == 1, link


def test_pro_page__names_the_feature_and_links_the_licence_docs(clients):
    for page, feature in (("locks", "Unique locks"), ("bulk", "Bulk operations")):
        response = clients["superuser"].get(url(page))
        assert response.status_code == 404
        html = response.content.decode()
        assert f"{feature} is a Pro feature" in html
        assert 'id="licence-docs"' in html and "docs/licence.md" in html
        assert "Technical details" not in html  # not Django's debug page


@override_settings(DEBUG=True)
def test_pro_page__not_the_debug_404_even_with_debug(clients):
    html = clients["superuser"].get(url("dedupe")).content.decode()
    assert "Dedupe audit is a Pro feature" in html


def test_pause__a_queue_without_jobs(clients):
    assert not Job.objects.filter(queue="quiet").exists()
    client = clients["permitted"]
    overview = client.get(url("overview")).content.decode()
    assert 'id="pause-queue"' in overview
    response = client.post(url("pause_named"), {"queue": "quiet"}, follow=True)
    assert b"Paused queue quiet." in response.content
    assert QueuePause.objects.filter(queue="quiet").exists()
    assert b'data-queue="quiet"' in response.content  # listed now, paused
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target, entry.source, entry.actor) == (
        "pause",
        "queue quiet",
        "console",
        "permitted",
    )
    response = client.post(url("pause_named"), {"queue": ""}, follow=True)
    assert b"A queue name must be 1 to 100 characters" in response.content
    assert clients["staff"].post(url("pause_named"), {"queue": "x"}).status_code == 403


def test_audit_page__newest_first_paginated_without_a_count(clients, monkeypatch):
    from django_jobqueue.console import views

    monkeypatch.setattr(views, "AUDIT_PAGE", 2)
    client = clients["permitted"]
    for name in ("q1", "q2", "q3"):
        client.post(url("queue_action", name, "pause"))
    html = client.get(url("audit")).content.decode()
    targets = re.findall(r"<td>(queue q\d)</td>", html)
    assert targets == ["queue q3", "queue q2"]
    older = re.search(r'id="next" href="([^"]+)"', html).group(1)
    html = client.get(url("audit") + older.replace("&amp;", "&")).content.decode()
    assert re.findall(r"<td>(queue q\d)</td>", html) == ["queue q1"]
    assert 'id="next"' not in html
