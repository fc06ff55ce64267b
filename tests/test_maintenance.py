"""Operators' actions on the job table (django_jobqueue.maintenance)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobqueue import maintenance
from django_jobqueue.models import Job, JobStatus, ScheduleJob
from tests.maintenance_helpers import make_job, make_jobs, running

pytestmark = pytest.mark.django_db

OLD = timedelta(days=30)


def _deletes(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"] for q in queries.captured_queries if q["sql"].lstrip().startswith("DELETE")]


# retry -----------------------------------------------------------------------------


def test_retry_jobs__dead_letter_starts_again_from_attempt_one() -> None:
    dead = make_job(
        status=JobStatus.MAX_RETRY,
        attempt=4,
        message="ValueError: boom",
        errors=[{"attempt": 4, "message": "boom", "traceback": "tb"}],
        job_id="invoice:7",
        id_held_until=timezone.now() + timedelta(days=7),
        age=timedelta(hours=1),
    )

    count = maintenance.retry_jobs(Job.objects.filter(pk=dead.pk))

    assert count == maintenance.RetryCount(dead=1, waiting=0)
    dead.refresh_from_db()
    assert dead.status == JobStatus.INIT
    assert dead.waiting is True
    assert dead.attempt == 0  # the next claim makes it attempt 1
    assert dead.finished_at is None
    assert dead.message == ""
    assert dead.errors == [{"attempt": 4, "message": "boom", "traceback": "tb"}]
    assert dead.job_id_hash is not None and dead.id_held_until is None  # id held again
    assert dead.run_at <= timezone.now()
    assert Job.objects.due().filter(pk=dead.pk).exists()


def test_retry_jobs__error_status_too() -> None:
    dead = make_job(status=JobStatus.ERROR, attempt=1)

    assert maintenance.retry_jobs(Job.objects.all()).dead == 1

    dead.refresh_from_db()
    assert (dead.status, dead.attempt) == (JobStatus.INIT, 0)


def test_retry_jobs__waiting_job_becomes_due_now() -> None:
    later = make_job(status=JobStatus.RETRY, run_at=timezone.now() + timedelta(hours=2))
    due = make_job(status=JobStatus.INIT)

    count = maintenance.retry_jobs(Job.objects.all())

    assert count == maintenance.RetryCount(dead=0, waiting=1)
    later.refresh_from_db()
    assert later.status == JobStatus.RETRY
    assert later.run_at <= timezone.now()
    assert Job.objects.due().filter(pk__in=[later.pk, due.pk]).count() == 2


def test_retry_jobs__leaves_running_done_and_cancelled_jobs_alone() -> None:
    job = running()
    done = make_job(status=JobStatus.DONE, attempt=1)
    cancelled = make_job(status=JobStatus.CANCELLED)

    assert maintenance.retry_jobs(Job.objects.all()).total == 0

    for row, status in ((job, JobStatus.PROCESSING), (done, JobStatus.DONE)):
        row.refresh_from_db()
        assert row.status == status and row.attempt == 1
    cancelled.refresh_from_db()
    assert cancelled.status == JobStatus.CANCELLED


def test_dead_jobs__narrows_by_queue_type_and_jid() -> None:
    a = make_job(status=JobStatus.ERROR, queue="emails", job_type="maint.noop")
    b = make_job(status=JobStatus.MAX_RETRY, queue="emails", job_type="maint.secret")
    c = make_job(status=JobStatus.MAX_RETRY, queue="other", job_type="maint.noop")
    make_job(status=JobStatus.DONE, queue="emails")

    def jids(**filters: object) -> set[str]:
        return set(maintenance.dead_jobs("default", **filters).values_list("jid", flat=True))

    assert jids() == {a.jid, b.jid, c.jid}
    assert jids(queue="emails") == {a.jid, b.jid}
    assert jids(job_type="maint.noop") == {a.jid, c.jid}
    assert jids(queue="emails", job_type="maint.noop") == {a.jid}
    assert jids(jids=[b.jid, c.jid]) == {b.jid, c.jid}


# cancel ----------------------------------------------------------------------------


def test_cancel_jobs__waiting_cancelled_and_running_asked_to_stop() -> None:
    waiting = make_job(status=JobStatus.INIT, job_id="draft:1")
    retry = make_job(status=JobStatus.RETRY, attempt=1)
    job = running()
    done = make_job(status=JobStatus.DONE)

    count = maintenance.cancel_jobs(Job.objects.all())

    assert count == maintenance.CancelCount(cancelled=2, requested=1)
    waiting.refresh_from_db()
    assert waiting.status == JobStatus.CANCELLED
    assert waiting.waiting is False
    assert waiting.job_id_hash is None  # docs/design.md#ids: cancel frees the id
    assert waiting.finished_at is not None
    retry.refresh_from_db()
    assert retry.status == JobStatus.CANCELLED
    job.refresh_from_db()
    assert (job.status, job.cancel_requested) == (JobStatus.PROCESSING, True)
    done.refresh_from_db()
    assert done.status == JobStatus.DONE
    # A second cancel changes nothing more.
    assert maintenance.cancel_jobs(Job.objects.all()) == maintenance.CancelCount(0, 0)


# delete ----------------------------------------------------------------------------


def test_delete_jobs__batches_and_keeps_running_jobs() -> None:
    make_jobs(5, status=JobStatus.DONE)
    job = running()

    with CaptureQueriesContext(connection) as queries:
        count = maintenance.delete_jobs(Job.objects.all(), batch_size=2)

    assert count == maintenance.DeleteCount(deleted=5, running=1)
    assert list(Job.objects.values_list("pk", flat=True)) == [job.pk]
    assert len(_deletes(queries)) == 3  # 2 + 2 + 1


def test_delete_jobs__rejects_a_bad_batch_size() -> None:
    with pytest.raises(ValueError, match=r"batch_size must be an integer >= 1: got 0\."):
        maintenance.delete_jobs(Job.objects.all(), batch_size=0)


# prune -----------------------------------------------------------------------------


def test_prune__deletes_old_done_jobs_in_batches_and_keeps_dead_letters() -> None:
    make_jobs(2_500, status=JobStatus.DONE, age=OLD)
    recent = make_job(status=JobStatus.DONE, age=timedelta(hours=1))
    dead = make_jobs(3, status=JobStatus.MAX_RETRY, age=OLD, id_held_until=timezone.now() - OLD)
    waiting = make_job(status=JobStatus.INIT)

    with CaptureQueriesContext(connection) as queries:
        count = maintenance.prune("default", batch_size=1_000)

    assert count == maintenance.PruneCount(done=2_500, cancelled=0, dead=0, dead_included=False)
    assert len(_deletes(queries)) == 3  # 1,000 + 1,000 + 500
    assert set(Job.objects.values_list("pk", flat=True)) == {
        recent.pk,
        waiting.pk,
        *(job.pk for job in dead),
    }


def test_prune__dry_run_counts_and_deletes_nothing() -> None:
    make_jobs(4, status=JobStatus.DONE, age=OLD)
    make_jobs(2, status=JobStatus.CANCELLED, age=OLD)
    make_jobs(3, status=JobStatus.ERROR, age=OLD, id_held_until=timezone.now() - OLD)

    with CaptureQueriesContext(connection) as queries:
        count = maintenance.prune("default", dead=True, dry_run=True)

    assert count == maintenance.PruneCount(done=4, cancelled=2, dead=3, dead_included=True)
    assert _deletes(queries) == []
    assert Job.objects.count() == 9


@override_settings(JOBQUEUE={"CLEAN_ERROR": True})
def test_prune__clean_error_deletes_dead_letters_past_their_keep() -> None:
    now = timezone.now()
    gone = make_jobs(3, status=JobStatus.MAX_RETRY, age=OLD, id_held_until=now - timedelta(days=1))
    kept = make_job(status=JobStatus.ERROR, age=OLD, id_held_until=now + timedelta(days=1))
    # No keep stamp: its queue's keep (JOBQUEUE["KEEP"], 7 days) decides.
    unstamped_old = make_job(status=JobStatus.ERROR, age=OLD)
    unstamped_new = make_job(status=JobStatus.ERROR, age=timedelta(days=1))

    count = maintenance.prune("default", batch_size=2)

    assert count.dead == 4 and count.dead_included
    remaining = set(Job.objects.values_list("pk", flat=True))
    assert remaining == {kept.pk, unstamped_new.pk}
    assert not {job.pk for job in gone} & remaining
    assert unstamped_old.pk not in remaining


@override_settings(JOBQUEUE={"QUEUES": {"short": {"keep": "1h"}}})
def test_prune__unstamped_dead_letters_use_their_queue_keep() -> None:
    short = make_job(status=JobStatus.ERROR, queue="short", age=timedelta(hours=2))
    default = make_job(status=JobStatus.ERROR, queue="default", age=timedelta(hours=2))

    count = maintenance.prune("default", dead=True)

    assert count.dead == 1
    assert not Job.objects.filter(pk=short.pk).exists()
    assert Job.objects.filter(pk=default.pk).exists()


def test_prune__keep_override_applies_to_every_dead_letter() -> None:
    make_job(status=JobStatus.ERROR, age=timedelta(hours=2), id_held_until=timezone.now() + OLD)
    young = make_job(status=JobStatus.ERROR, age=timedelta(minutes=5))

    count = maintenance.prune("default", dead=True, keep=timedelta(hours=1))

    assert count.dead == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [young.pk]


def test_prune__keeps_jobs_that_still_hold_their_id_or_unique_key() -> None:
    now = timezone.now()
    deduping = make_job(
        status=JobStatus.DONE, age=OLD, job_id="digest:1", id_held_until=now + timedelta(hours=1)
    )
    locking = make_job(
        status=JobStatus.MAX_RETRY,
        age=OLD,
        id_held_until=now - OLD,
        unique_key="k",
        unique_mode="until_executed",
        unique_expires_at=now + timedelta(hours=1),
    )
    released = make_job(
        status=JobStatus.DONE, age=OLD, job_id="digest:2", id_held_until=now - timedelta(hours=1)
    )

    count = maintenance.prune("default", dead=True)

    assert (count.done, count.dead) == (1, 0)
    assert set(Job.objects.values_list("pk", flat=True)) == {deduping.pk, locking.pk}
    assert not Job.objects.filter(pk=released.pk).exists()


def test_prune__retention_override() -> None:
    make_job(status=JobStatus.DONE, age=timedelta(hours=3))
    young = make_job(status=JobStatus.DONE, age=timedelta(minutes=30))

    count = maintenance.prune("default", retention=timedelta(hours=1))

    assert count.done == 1
    assert list(Job.objects.values_list("pk", flat=True)) == [young.pk]


# status ----------------------------------------------------------------------------


def test_queue_status__counts_oldest_wait_and_busy_workers() -> None:
    now = timezone.now()
    make_job(queue="emails", status=JobStatus.INIT, run_at=now - timedelta(seconds=90))
    make_job(queue="emails", status=JobStatus.RETRY, attempt=1, run_at=now - timedelta(seconds=5))
    make_job(queue="emails", status=JobStatus.INIT, run_at=now + timedelta(hours=1))  # scheduled
    running("host:1:w1", queue="emails")
    running("host:1:w1", queue="emails")
    running("host:2:w1", queue="emails")
    running("host:3:w1", queue="emails", lease_s=-10)  # lease expired: a dead worker
    make_jobs(4, queue="reports", status=JobStatus.DONE)
    make_job(queue="reports", status=JobStatus.MAX_RETRY)

    rows = {row.queue: row for row in maintenance.queue_status("default")}

    assert list(rows) == ["emails", "reports"]
    emails = rows["emails"]
    assert emails.counts == {
        "init": 2,
        "processing": 4,
        "retry": 1,
        "error": 0,
        "max_retry": 0,
        "done": 0,
        "cancelled": 0,
        "blocked": 0,  # waiting for upstream jobs (docs/workflows.md)
    }
    assert emails.busy_workers == 2
    assert emails.oldest_waiting_s is not None and 90 <= emails.oldest_waiting_s < 3_600
    reports = rows["reports"]
    assert (reports.counts["done"], reports.counts["max_retry"]) == (4, 1)
    assert reports.oldest_waiting_s is None
    assert reports.busy_workers == 0
    assert maintenance.busy_workers("default") == 2


def test_queue_status__named_queues_even_without_jobs() -> None:
    make_job(queue="emails")

    rows = maintenance.queue_status("default", queues=["idle", "emails"])

    assert [row.queue for row in rows] == ["emails", "idle"]
    assert sum(rows[1].counts.values()) == 0


# schedules -------------------------------------------------------------------------


def test_schedule_actions__enable_disable_run_now() -> None:
    later = timezone.now() + timedelta(days=1)
    on = ScheduleJob.objects.create(name="a", queue="q", job_type="maint.noop", schedule_at=later)
    off = ScheduleJob.objects.create(
        name="b", queue="q", job_type="maint.noop", enabled=False, schedule_at=later
    )

    assert maintenance.disable_schedules(ScheduleJob.objects.all()) == 1
    assert not ScheduleJob.objects.filter(enabled=True).exists()
    assert maintenance.enable_schedules(ScheduleJob.objects.all()) == 2
    assert maintenance.run_schedules_now(ScheduleJob.objects.filter(pk=off.pk)) == 1
    off.refresh_from_db()
    on.refresh_from_db()
    assert off.schedule_at <= timezone.now() < on.schedule_at
