"""A retention of zero: done jobs' rows deleted at their end, unless something needs them."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import Sum
from django.test import override_settings

from django_jobqueue import enqueue_job, storage
from django_jobqueue.models import Job, JobStatus, JobTotal
from django_jobqueue.worker.foreman import Foreman, ForemanOptions
from tests.testapp.jobtypes.ids import draft, plain

pytestmark = pytest.mark.django_db(transaction=True)

NOT_KEPT = override_settings(JOBQUEUE={"RETENTION": "0s"})


@NOT_KEPT
def test_a_drain_deletes_its_done_jobs_and_still_counts_them() -> None:
    for i in range(40):
        enqueue_job(None, "flows.noop", {"n": i})
    run = Foreman(
        ForemanOptions(burst=True, concurrency=4, min_sleep_ms=5, max_sleep_ms=50, ramp_time_ms=0)
    )
    assert run.run(install_signals=False) == {"done": 40}
    assert not Job.objects.exists()
    totals = JobTotal.objects.filter(job_type="flows.noop").aggregate(done=Sum("done"))
    assert totals["done"] == 40


@NOT_KEPT
def test_rows_something_needs_stay_done_and_the_rest_go() -> None:
    """One flush of a mixed batch: a result, an id held by dedupe, a ``while_locked``
    unique key and a dependent enqueued while it ran keep their rows (``done``); an
    id freed at the end, an ``until_executed`` key and a plain job go; a lost lease
    is neither deleted nor written."""
    draft.add("d", id="kept")  # dedupe 1 hour: the id stays held after the end
    plain.add("p", id="freed")  # no dedupe: the id is free at the end
    locked = enqueue_job("default", "flows.noop", {"k": 1}, unique_key="locked")
    executed = enqueue_job("default", "flows.noop", {"k": 2}, unique_key="executed")
    # until_executed is Pro: set on the row, as a licensed enqueue would have written it.
    Job.objects.filter(jid=executed.jid).update(unique_mode="until_executed")
    for i in range(4):
        enqueue_job("default", "flows.noop", {"label": str(i)})
    queues = ["ids", "ids-plain", "default"]
    rest = {job.jid: job for job in storage.claim("default", owner="t", limit=20, queues=queues)}
    by_id = {job.job_id: jid for jid, job in rest.items() if job.job_id is not None}
    by_name: dict[str, Any] = {}
    by_name["held_id"], by_name["freed_id"] = rest.pop(by_id["kept"]), rest.pop(by_id["freed"])
    by_name["locked"], by_name["executed"] = rest.pop(locked.jid), rest.pop(executed.jid)
    by_name["result"], by_name["awaited"], by_name["plain"], by_name["stolen"] = rest.values()
    Job.objects.filter(pk=by_name["stolen"].pk).update(lease_token="someone-else")
    # A dependent's enqueue marks its upstream row under the row's lock.
    Job.objects.filter(pk=by_name["awaited"].pk).update(awaited=True)
    results = {"result": {"n": 1}}
    flags = storage.complete_many([(job, results.get(name)) for name, job in by_name.items()])
    assert dict(zip(by_name, flags, strict=True)) == {
        "held_id": True,
        "freed_id": True,
        "locked": True,
        "executed": True,
        "result": True,
        "awaited": True,
        "plain": True,
        "stolen": False,
    }
    rows = {job.pk: job for job in Job.objects.all()}
    kept = {name for name, job in by_name.items() if job.pk in rows}
    assert kept == {"held_id", "locked", "result", "awaited", "stolen"}
    for name in kept - {"stolen"}:
        assert rows[by_name[name].pk].status == JobStatus.DONE, name
    assert rows[by_name["result"].pk].result == {"n": 1}
    assert rows[by_name["held_id"].pk].job_id_hash is not None
    assert rows[by_name["locked"].pk].unique_key_hash is not None
    assert rows[by_name["stolen"].pk].status == JobStatus.PROCESSING
    # The freed id and the until_executed key are free again at once.
    assert plain.add("p2", id="freed") is True
    assert enqueue_job("default", "flows.noop", {}, unique_key="executed").status == "enqueued"


def test_done_jobs_are_kept_by_default() -> None:
    enqueue_job("default", "flows.noop", {})
    [job] = storage.claim("default", owner="t", limit=1)
    assert storage.complete_many([(job, None)]) == [True]
    assert Job.objects.get(pk=job.pk).status == JobStatus.DONE


@NOT_KEPT
def test_a_deleted_job_is_one_statement_on_postgresql_and_sqlite(
    django_assert_num_queries: Any,
) -> None:
    for i in range(3):
        enqueue_job("default", "flows.noop", {"n": i})
    jobs = storage.claim("default", owner="t", limit=3)
    # MariaDB: START TRANSACTION, the locking SELECT, the DELETE, COMMIT.
    with django_assert_num_queries(4 if connection.vendor == "mysql" else 1):
        assert storage.complete_many([(job, None) for job in jobs]) == [True] * 3
    assert not Job.objects.exists()


@override_settings(JOBQUEUE={"RETENTION": "0s", "DEDUPE": "1h"})
def test_a_dedupe_keeps_the_rows_of_jobs_with_an_id_only() -> None:
    """``DEDUPE`` holds a done job's id: a job with no id has none to hold, and its
    row goes as any other's."""
    plain.add("p", id="held")
    enqueue_job("default", "flows.noop", {})
    jobs = storage.claim("default", owner="t", limit=2, queues=["ids-plain", "default"])
    assert storage.complete_many([(job, None) for job in jobs]) == [True, True]
    [(job_id, status)] = Job.objects.values_list("job_id", "status")
    assert (job_id, status) == ("held", JobStatus.DONE)
