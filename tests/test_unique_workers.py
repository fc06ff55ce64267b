"""The unique-key examples of docs/design.md#unique-keys, run by real workers.

Each handler enqueues through ``ctx.enqueue_job``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store.licence import generate_key_pair, issue_licence
from tests.workers_helpers import drain, run_workers

pytestmark = pytest.mark.django_db(transaction=True)

QUEUE = "unique"


def test_seed_example__while_locked_second_enqueue_in_a_running_job_is_deduplicated():
    producer = enqueue_job(QUEUE, "unique.produce_options", {"probe": "p1"})
    outcomes = drain([QUEUE], concurrency=2)
    result = Job.objects.get(jid=producer.jid).result
    assert result["r1"]["status"] == "enqueued"
    assert result["r2"] == {"status": "deduplicated", "jid": result["r1"]["jid"]}
    first = Job.objects.get(jid=result["r1"]["jid"])
    assert (first.status, first.payload["tag"]) == (JobStatus.DONE, "first")
    assert Job.objects.filter(job_type="unique.opt").count() == 1
    assert outcomes.get("done") == 2


def test_seed_example__until_executed_deduplicated_while_pending_or_running_then_accepted():
    private_pem, public_pem = generate_key_pair()
    token = issue_licence(
        private_pem, licensee="Tests Ltd", expires_at=datetime.now(UTC) + timedelta(days=1)
    )
    with override_settings(JOBQUEUE={"LICENCE_KEY": token, "LICENCE_PUBLIC_KEYS": [public_pem]}):
        producer = enqueue_job(QUEUE, "unique.produce_unique", {"probe": "p2"})
        workers = run_workers("--burst", "--queues", QUEUE, "--concurrency", "2", wait=False)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                slow = Job.objects.filter(job_type="unique.slow").first()
                if slow is not None and slow.status == JobStatus.PROCESSING:
                    break
                time.sleep(0.05)
            else:
                pytest.fail("the until_executed job never started")
            # Running: the same key and mode is still deduplicated, naming the holder.
            running = enqueue_job(
                QUEUE, "unique.slow", {"n": 3, "seconds": 0},
                unique_key="um-p2", unique_mode="until_executed",
            )  # fmt: skip
            assert (running.status, running.jid) == ("deduplicated", slow.jid)
            _out, err = workers.communicate(timeout=90)
        finally:
            if workers.poll() is None:
                workers.kill()
        assert workers.returncode == 0, err
        result = Job.objects.get(jid=producer.jid).result
        assert result["r1"]["status"] == "enqueued"
        assert result["r2"] == {"status": "deduplicated", "jid": result["r1"]["jid"]}
        assert list(
            Job.objects.filter(job_type="unique.slow").values_list("status", flat=True)
        ) == [JobStatus.DONE]
        # Completed: the key is accepted again.
        after = enqueue_job(
            QUEUE, "unique.slow", {"n": 4, "seconds": 0},
            unique_key="um-p2", unique_mode="until_executed",
        )  # fmt: skip
        assert after.status == "enqueued"
