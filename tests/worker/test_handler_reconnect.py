"""A handler's own connection after idleness, the same on PostgreSQL and MariaDB.

The server closes every worker session idle for a second (PostgreSQL
``idle_session_timeout``, MariaDB ``wait_timeout``, set per session for every
thread but the test's). A handler that computes for longer, then writes through the
ORM outside ``atomic()``, gets one transparent reconnect (worker/connections.py,
README "Database notes"); inside ``atomic()`` the dead connection stays an error.
"""

from __future__ import annotations

import pytest

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from tests.testapp.models import RunRecord
from tests.worker.conftest import IDLE_S
from tests.workers_helpers import drain

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql", "mysql")]


def test_write_after_idle_outside_atomic__reconnects_once_and_is_stored(
    idle_timeout: None, caplog: pytest.LogCaptureFixture
) -> None:
    jid = enqueue_job(None, "starts.write_after_idle", {"s": IDLE_S * 3})["jid"]
    assert drain(concurrency=1, lease_ms=30_000) == {"done": 1}
    row = Job.objects.get(jid=jid)
    assert (row.status, row.attempt) == (JobStatus.DONE, 1)
    assert RunRecord.objects.filter(jid=jid, label="after_idle").count() == 1
    lost = [r for r in caplog.records if "lost while idle in a handler" in r.getMessage()]
    assert len(lost) == 1


def test_write_after_idle_inside_atomic__stays_an_error(idle_timeout: None) -> None:
    jid = enqueue_job(None, "starts.write_after_idle", {"s": IDLE_S * 3, "atomic": True})["jid"]
    assert drain(concurrency=1, lease_ms=30_000) == {"max_retry": 1}
    row = Job.objects.get(jid=jid)
    assert row.status == JobStatus.MAX_RETRY  # max_retry=0: the first failure is final
    assert row.errors[-1]["exception_class"].endswith(("OperationalError", "InterfaceError"))
    assert not RunRecord.objects.filter(jid=jid).exists()


def test_step_after_idle__begins_on_a_live_connection(idle_timeout: None) -> None:
    # A step's BEGIN is outside the handler's per-statement idle check: the step
    # checks its connection before it (docs/workflows.md "Resumable steps").
    jid = enqueue_job(None, "steps.after_idle", {"s": IDLE_S * 3})["jid"]
    assert drain(concurrency=1, lease_ms=30_000) == {"done": 1}
    row = Job.objects.get(jid=jid)
    assert (row.status, row.result) == (JobStatus.DONE, "written")
    assert RunRecord.objects.filter(jid=jid, label="after_idle").count() == 1
