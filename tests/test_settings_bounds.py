"""The integer keys of ``JOBQUEUE`` have a largest value as well as a least one.

A key past what the database's columns, a date or a thread's wait can hold used to
pass the checks; every worker then retried a failing step for ever. Each is now a
settings error naming the key and its range, and a worker run with every key at its
largest drains and exits on each database (README "Configuration").
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from django_jobqueue import enqueue_job, enqueue_many
from django_jobqueue.core.conf import MAX_CONCURRENCY, validate_settings
from django_jobqueue.core.validation import MAX_INT
from django_jobqueue.models import Job, JobStatus
from tests.workers_helpers import run_workers

pytestmark = pytest.mark.django_db(transaction=True)

MS_KEYS = [
    "BREAK_TIME_MS",
    "RAMP_TIME_MS",
    "PREFETCH_MS",
    "MIN_SLEEP_MS",
    "MAX_SLEEP_MS",
    "LEASE_MS",
    "HEARTBEAT_MS",
    "DEFAULT_TIMEOUT_MS",
    "BACKOFF_BASE_MS",
    "BACKOFF_MAX_MS",
    "LOCK_TIMEOUT_MS",
    "SHUTDOWN_TIMEOUT_MS",
]


@pytest.mark.parametrize("key", [*MS_KEYS, "DEFAULT_PRIORITY", "DEFAULT_MAX_RETRY"])
def test_a_key_past_the_largest_32_bit_integer__is_a_settings_error(key):
    with override_settings(JOBQUEUE={key: MAX_INT + 1}):
        errors = validate_settings()
    (error,) = [e for e in errors if key in e]
    assert f"to {MAX_INT:,}: got {MAX_INT + 1}." in error


def test_concurrency_past_its_largest__is_a_settings_error_and_runworkers_refuses_it():
    with override_settings(JOBQUEUE={"CONCURRENCY": 10**20}):
        assert validate_settings() == [
            f"JOBQUEUE['CONCURRENCY'] must be an integer from 1 to {MAX_CONCURRENCY:,}: "
            f"got {10**20}."
        ]
        with pytest.raises(CommandError, match=r"JOBQUEUE\['CONCURRENCY'\] must be an integer"):
            call_command("runworkers", "--burst", "-v", "0")


def test_lease_of_10_to_the_20__refused_before_any_job_is_claimed():
    jid = enqueue_job("default", "worker.record", {}).jid
    with override_settings(JOBQUEUE={"LEASE_MS": 10**20}):
        proc = run_workers("--burst", "-v", "0", timeout_s=60)
    assert proc.returncode != 0
    assert "JOBQUEUE['LEASE_MS'] must be an integer from 1000 to 2,147,483,647" in proc.stderr
    job = Job.objects.get(jid=jid)
    assert (job.status, job.attempt) == (JobStatus.INIT, 0)  # not claimed, not spent


def test_gateway_claim_poll_past_its_largest__is_a_settings_error():
    with override_settings(JOBQUEUE={"GATEWAY": {"CLAIM_POLL_MS": MAX_INT + 1}}):
        errors = validate_settings()
    assert errors == [
        f"JOBQUEUE['GATEWAY']['CLAIM_POLL_MS'] must be an integer from 10 to {MAX_INT:,}: "
        f"got {MAX_INT + 1}."
    ]


def test_keys_without_a_largest_keep_their_message():
    with override_settings(JOBQUEUE={"MAX_RESULT_BYTES": 0, "GATEWAY": {"MAX_BATCH": True}}):
        errors = validate_settings()
    assert "JOBQUEUE['MAX_RESULT_BYTES'] must be an integer >= 1: got 0." in errors
    assert "JOBQUEUE['GATEWAY']['MAX_BATCH'] must be an integer >= 1: got True." in errors


def test_every_key_at_its_largest__a_worker_drains_and_exits():
    """A run and a failure's retry with every bounded key at its largest: no value
    overflows a column, a date or a wait (the failure's retry is due within the
    largest backoff, 24.8 days)."""
    largest = {key: MAX_INT for key in MS_KEYS if key != "BREAK_TIME_MS"}  # a pause per job
    largest.update(
        HEARTBEAT_MS=MAX_INT // 3,  # at most a third of LEASE_MS
        MIN_SLEEP_MS=1,
        CONCURRENCY=MAX_CONCURRENCY,
        DEFAULT_PRIORITY=MAX_INT,
        DEFAULT_MAX_RETRY=MAX_INT,
    )
    with override_settings(JOBQUEUE=largest):
        assert validate_settings() == []
        done = [job.jid for job in enqueue_many([{"job_type": "worker.record"}] * 20)]
        failing_jid = enqueue_job("default", "worker.fail", {}).jid
        before = timezone.now()
        proc = run_workers("--burst", "-v", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The one traceback is the failing handler's own, logged with its failure.
    assert proc.stderr.count("Traceback") == 1, proc.stderr[-3000:]
    assert "RuntimeError: boom" in proc.stderr
    assert Job.objects.filter(jid__in=done, status=JobStatus.DONE).count() == 20
    failing = Job.objects.get(jid=failing_jid)
    assert (failing.status, failing.attempt) == (JobStatus.RETRY, 1)
    assert before < failing.run_at <= timezone.now() + timedelta(milliseconds=MAX_INT)
