"""``manage.py jobqueue``: status, prune, retry and licence, through call_command."""

from __future__ import annotations

import json
from datetime import date, timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store.jobstats import StatsBuffer
from django_jobqueue.store.licence import generate_key_pair, issue_licence
from tests.maintenance_helpers import make_job, make_jobs, running

pytestmark = pytest.mark.django_db

OLD = timedelta(days=30)


def jobqueue(*args: Any, **options: Any) -> str:
    out = StringIO()
    call_command("jobqueue", *args, stdout=out, **options)
    return out.getvalue()


def test_requires_a_subcommand() -> None:
    with pytest.raises(CommandError, match=r"^Error: the following arguments are required: "):
        jobqueue()


# status ----------------------------------------------------------------------------


def test_status__no_jobs() -> None:  # and no statistics
    assert jobqueue("status") == "No jobs.\n"


def test_status__table() -> None:
    make_jobs(2, queue="emails", status=JobStatus.DONE)
    make_job(queue="emails", status=JobStatus.MAX_RETRY)
    make_job(queue="emails", status=JobStatus.INIT, run_at=timezone.now() + timedelta(hours=1))
    running("host:1:w1", queue="default")
    running("host:1:w2", queue="default")

    buffer = StatsBuffer()
    buffer.record("emails", "maint.noop", "done", 5)
    buffer.record("emails", "maint.noop", "retried", 5)
    buffer.record("emails", "maint.noop", "failed", 5)
    buffer.flush("default")

    # The count columns are the state words (docs/console.md#states), not stored statuses.
    assert jobqueue("status") == (
        "queue    scheduled  waiting  running  failed  done  cancelled  blocked"
        "  oldest_waiting_s  busy_workers  done_1h  failed_attempts_1h  dead_letters_1h\n"
        "default          0        0        2       0     0          0        0"
        "                 -             2        0                   0                0\n"
        "emails           1        0        0       1     2          0        0"
        "                 -             0        1                   2                1\n"
        "Busy workers (holding a job now): 2\n"
    )


def test_status__states_split_init_and_retry_jobs_by_run_at() -> None:
    later = timezone.now() + timedelta(hours=1)
    make_job(queue="emails", status=JobStatus.INIT)
    make_job(queue="emails", status=JobStatus.RETRY)
    make_job(queue="emails", status=JobStatus.RETRY, run_at=later)
    make_job(queue="emails", status=JobStatus.INIT, run_at=later)
    make_job(queue="emails", status=JobStatus.ERROR)
    make_job(queue="emails", status=JobStatus.MAX_RETRY)
    make_job(queue="emails", status=JobStatus.CANCELLED)
    running("host:1:w1", queue="emails")

    [emails] = json.loads(jobqueue("status", "--json"))["queues"]

    assert emails["states"] == {
        "scheduled": 2, "waiting": 2, "running": 1, "failed": 2, "done": 0, "cancelled": 1,
        "blocked": 0,
    }  # fmt: skip
    # The stored statuses stay in the JSON, beside the words.
    assert emails["counts"] == {
        "init": 2, "retry": 2, "processing": 1, "error": 1, "max_retry": 1, "done": 0,
        "cancelled": 1, "blocked": 0,
    }  # fmt: skip
    [row] = [line.split() for line in jobqueue("status").splitlines() if line.startswith("emails")]
    assert row[1:7] == ["2", "2", "1", "2", "0", "1"]


def test_status__a_queue_whose_jobs_are_gone_is_reported_by_its_statistics() -> None:
    buffer = StatsBuffer()
    for _ in range(25):
        buffer.record("emails", "maint.noop", "done", 5)
    buffer.flush("default")

    data = json.loads(jobqueue("status", "--json"))

    [emails] = data["queues"]
    assert emails["queue"] == "emails" and emails["counts"]["done"] == 0  # no row left
    assert emails["last_hour"] == {"done": 25, "failed_attempts": 0, "dead_letters": 0}
    assert emails["totals"] == {
        "done": 25,
        "failed_attempts": 0,
        "dead_letters": 0,
        "deduplicated": 0,
    }
    [row] = [line.split() for line in jobqueue("status").splitlines() if line.startswith("emails")]
    assert row[-3:] == ["25", "0", "0"]  # done_1h, failed_attempts_1h, dead_letters_1h


def test_status__names_the_paused_queues() -> None:
    from django_jobqueue.store.pauses import pause_queue

    make_job(queue="emails")
    pause_queue("default", "emails", by="test")
    pause_queue("default", "idle", by="test")  # paused while it has no job: still named
    text = jobqueue("status")
    assert "Paused queues (not claimed until resumed): emails, idle\n" in text
    assert json.loads(jobqueue("status", "--json"))["paused_queues"] == ["emails", "idle"]


def test_status__json_and_oldest_wait() -> None:
    make_job(queue="emails", run_at=timezone.now() - timedelta(seconds=120))
    make_job(queue="emails", run_at=timezone.now() - timedelta(seconds=3))
    running("host:9:w1", queue="emails")
    running("host:9:w1", queue="emails", lease_s=-1)  # expired lease: not live

    data = json.loads(jobqueue("status", "--json"))

    assert data["busy_workers"] == 1
    [emails] = data["queues"]
    assert emails["queue"] == "emails"
    assert emails["counts"]["init"] == 2
    assert emails["counts"]["processing"] == 2
    assert emails["busy_workers"] == 1
    assert 120 <= emails["oldest_waiting_s"] < 3_600


def test_status__one_queue() -> None:
    make_job(queue="emails")
    make_job(queue="reports")

    data = json.loads(jobqueue("status", "--json", "--queue", "reports"))

    assert [row["queue"] for row in data["queues"]] == ["reports"]


def test_status__unknown_database() -> None:
    with pytest.raises(
        CommandError,
        match=r"^Error: argument --database: unknown database alias 'nope'; use one of default$",
    ):
        jobqueue("status", "--database", "nope")


# prune -----------------------------------------------------------------------------


def test_prune__batches_and_keeps_dead_letters_without_clean_error() -> None:
    make_jobs(2_500, status=JobStatus.DONE, age=OLD)
    make_jobs(3, status=JobStatus.MAX_RETRY, age=OLD, id_held_until=timezone.now() - OLD)
    make_job(status=JobStatus.DONE)

    out = jobqueue("prune", "--batch-size", "1000")

    assert out == (
        "Deleted 2500 done and 0 cancelled jobs.\n"
        "Dead letters kept: JOBQUEUE['CLEAN_ERROR'] is False; add --dead to prune them.\n"
    )
    assert Job.objects.filter(status=JobStatus.DONE).count() == 1
    assert Job.objects.dead().count() == 3


def test_prune__dead_flag() -> None:
    make_jobs(2, status=JobStatus.DONE, age=OLD)
    make_jobs(3, status=JobStatus.ERROR, age=OLD, id_held_until=timezone.now() - OLD)

    assert jobqueue("prune", "--dead") == "Deleted 2 done, 0 cancelled and 3 dead jobs.\n"
    assert Job.objects.count() == 0


@override_settings(JOBQUEUE={"CLEAN_ERROR": True})
def test_prune__clean_error_setting_and_keep_override() -> None:
    make_job(status=JobStatus.ERROR, age=timedelta(hours=3), id_held_until=timezone.now() + OLD)
    make_job(status=JobStatus.ERROR, age=timedelta(minutes=5))

    assert jobqueue("prune", "--keep", "1h") == "Deleted 0 done, 0 cancelled and 1 dead jobs.\n"
    assert Job.objects.count() == 1


def test_prune__dry_run() -> None:
    make_jobs(3, status=JobStatus.DONE, age=OLD)
    make_job(status=JobStatus.CANCELLED, age=OLD)

    out = jobqueue("prune", "--dry-run", "--retention", "1d")

    assert out.splitlines()[0] == "Would delete 3 done and 1 cancelled jobs."
    assert Job.objects.count() == 4


def test_prune__retention_option() -> None:
    make_job(status=JobStatus.DONE, age=timedelta(hours=2))
    make_job(status=JobStatus.DONE, age=timedelta(minutes=10))

    out = jobqueue("prune", "--retention", "1h")

    assert out.splitlines()[0] == "Deleted 1 done and 0 cancelled jobs."
    assert Job.objects.count() == 1


def test_prune__keep_without_dead_letters_is_a_mistake() -> None:
    with pytest.raises(CommandError) as info:
        jobqueue("prune", "--keep", "1h")
    assert str(info.value) == (
        "--keep applies to dead letters, which are not pruned; add --dead or set "
        "JOBQUEUE['CLEAN_ERROR'] = True."
    )


@pytest.mark.parametrize("value", ["0", "-3", "ten"])
def test_prune__bad_batch_size(value: str) -> None:
    with pytest.raises(CommandError) as info:
        jobqueue("prune", "--batch-size", value)
    assert str(info.value) == (
        f"Error: argument --batch-size: must be an integer from 1 to 1,000,000: got {value!r}"
    )


def test_prune__bad_retention() -> None:
    with pytest.raises(CommandError) as info:
        jobqueue("prune", "--retention", "soon")
    assert str(info.value) == (
        "Error: argument --retention: the duration 'soon' is not a duration; use seconds "
        "or a string like '500ms', '5s', '1m', '1h' or '7d'"
    )


# retry -----------------------------------------------------------------------------


def test_retry__by_queue() -> None:
    mine = make_jobs(2, queue="emails", status=JobStatus.MAX_RETRY, attempt=4)
    other = make_job(queue="reports", status=JobStatus.ERROR, attempt=1)
    make_job(queue="emails", status=JobStatus.DONE)

    assert jobqueue("retry", "--queue", "emails") == "Retried 2 dead jobs; they are due now.\n"

    for job in mine:
        job.refresh_from_db()
        assert (job.status, job.attempt, job.waiting) == (JobStatus.INIT, 0, True)
    other.refresh_from_db()
    assert other.status == JobStatus.ERROR


def test_retry__by_type_and_jid() -> None:
    a = make_job(job_type="maint.secret", status=JobStatus.ERROR)
    b = make_job(job_type="maint.noop", status=JobStatus.ERROR)
    c = make_job(job_type="maint.noop", status=JobStatus.ERROR)

    assert jobqueue("retry", "--type", "maint.secret", "--dry-run") == "Would retry 1 dead job.\n"
    assert jobqueue("retry", "--type", "maint.secret") == "Retried 1 dead job; it is due now.\n"
    assert jobqueue("retry", "--jid", b.jid) == "Retried 1 dead job; it is due now.\n"

    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {a.pk: JobStatus.INIT, b.pk: JobStatus.INIT, c.pk: JobStatus.ERROR}


def test_retry__all_and_dry_run() -> None:
    make_jobs(3, status=JobStatus.MAX_RETRY)

    assert jobqueue("retry", "--all", "--dry-run") == "Would retry 3 dead jobs.\n"
    assert Job.objects.dead().count() == 3
    assert jobqueue("retry", "--all") == "Retried 3 dead jobs; they are due now.\n"
    assert Job.objects.dead().count() == 0


def test_retry__needs_a_choice() -> None:
    with pytest.raises(CommandError) as info:
        jobqueue("retry")
    assert str(info.value) == (
        "Choose the dead letters to retry: give --queue, --type, --jid or --all."
    )


def test_retry__all_is_alone() -> None:
    with pytest.raises(CommandError) as info:
        jobqueue("retry", "--all", "--queue", "emails")
    assert str(info.value) == (
        "--all retries every dead letter; give it without --queue, --type or --jid."
    )


def test_retry__unknown_jid() -> None:
    dead = make_job(status=JobStatus.ERROR)

    with pytest.raises(CommandError) as info:
        jobqueue("retry", "--jid", dead.jid, "--jid", "nope")

    assert str(info.value) == "No job has jid nope; copy the jid from the admin or the logs."
    assert Job.objects.get(pk=dead.pk).status == JobStatus.ERROR  # nothing written


def test_retry__jid_of_a_job_that_is_not_dead() -> None:
    job = running()

    with pytest.raises(CommandError) as info:
        jobqueue("retry", "--jid", job.jid)

    assert str(info.value) == (
        "Only failed jobs (dead letters: error, max_retry) can be retried, but "
        f"{job.jid} is running (processing); leave those out."
    )


def test_retry__empty_queue_name() -> None:
    with pytest.raises(CommandError) as info:
        jobqueue("retry", "--queue", " ")
    assert str(info.value) == "Error: argument --queue: must not be empty"


# licence ---------------------------------------------------------------------------


def test_licence__core_without_a_key() -> None:
    assert jobqueue("licence") == "Core: no licence key is set (JOBQUEUE['LICENCE_KEY']).\n"


def test_licence__pro_with_a_valid_key() -> None:
    private_pem, public_pem = generate_key_pair()
    key = issue_licence(private_pem, licensee="ACME Ltd", expires_at=date(2999, 12, 31))

    with override_settings(JOBQUEUE={"LICENCE_KEY": key, "LICENCE_PUBLIC_KEYS": [public_pem]}):
        out = jobqueue("licence")

    assert out == "Pro, licensed to ACME Ltd, valid until 2999-12-31 23:59:59 UTC.\n"


def test_licence__expired_key() -> None:
    private_pem, public_pem = generate_key_pair()
    key = issue_licence(private_pem, licensee="ACME Ltd", expires_at=date(2020, 1, 31))

    with override_settings(JOBQUEUE={"LICENCE_KEY": key, "LICENCE_PUBLIC_KEYS": [public_pem]}):
        out = jobqueue("licence")

    assert out == (
        "Core: the Pro licence of ACME Ltd expired at 2020-01-31 23:59:59 UTC; "
        "Pro features are off.\n"
    )
