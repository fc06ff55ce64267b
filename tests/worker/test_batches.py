"""Batched claims and completions: limits, order, fencing and statement counts."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from django.db import connection

from django_jobqueue import enqueue_job, enqueue_many, storage
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import limits
from django_jobqueue.store.pauses import paused_queues
from django_jobqueue.worker.foreman import Foreman, ForemanOptions
from tests.testapp.jobtypes import worker as worker_jobs
from tests.testapp.models import RunRecord

pytestmark = pytest.mark.django_db(transaction=True)

#: Statements of one claim(limit=n) and of one completion flush, per vendor:
#: PostgreSQL and SQLite write and read back in one UPDATE ... RETURNING; MariaDB
#: selects under FOR UPDATE, then updates, in one transaction (its START TRANSACTION and COMMIT
#: are captured statements there).
STATEMENTS = {"postgresql": 1, "sqlite": 1, "mysql": 4}


def foreman(**options: Any) -> Foreman:
    options.setdefault("min_sleep_ms", 5)
    options.setdefault("max_sleep_ms", 50)
    options.setdefault("ramp_time_ms", 0)
    return Foreman(ForemanOptions(burst=True, **options))


def test_claim__a_batch_is_one_statement_in_claim_order(django_assert_num_queries: Any) -> None:
    for priority, label in [(5, "e"), (1, "a"), (3, "c"), (1, "b"), (9, "z")]:
        enqueue_job(None, "worker.record", {"label": label}, priority=priority)
    paused_queues("default")  # the paused set is a cached read, not part of each claim
    limits.active("default")  # so are the limits in force (none here: the plain claim)
    with django_assert_num_queries(STATEMENTS[connection.vendor]):
        jobs = storage.claim("default", owner="t", limit=4)
    assert [j.payload["label"] for j in jobs] == ["a", "b", "c", "e"]
    assert {j.status for j in jobs} == {JobStatus.PROCESSING}
    assert len({j.lease_token for j in jobs}) == 1
    stored = {j.pk: j for j in Job.objects.filter(pk__in=[j.pk for j in jobs])}
    for job in jobs:
        assert stored[job.pk].lease_token == job.lease_token
        assert stored[job.pk].attempt == job.attempt == 1
        assert stored[job.pk].lease_expires_at == job.lease_expires_at
        assert stored[job.pk].started_at == job.started_at
    [rest] = storage.claim("default", owner="t", limit=4)
    assert rest.payload["label"] == "z"


def test_claim__takes_at_most_its_limit_after_the_table_was_analysed_with_few_waiting() -> None:
    """Analysed while nearly every job was done (a job table's usual state), then
    a burst enqueued: PostgreSQL's planner, expecting about one waiting row, put the
    claim's locking ``IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)`` on the inner
    side of a nested-loop semi join. Run again for each waiting row, each run skipped
    the rows the statement had just updated and locked the next n, so one claim of
    limit 3 took every due job (found in a benchmark: 5,000 in one claim)."""
    done = [{"job_type": "worker.record", "payload": {"label": "old"}}] * 300
    enqueue_many(done)
    Job.objects.update(status=JobStatus.DONE, waiting=False)
    table = connection.ops.quote_name(Job._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"ANALYZE TABLE {table}" if connection.vendor == "mysql" else f"ANALYZE {table}"
        )
        if connection.vendor == "mysql":
            cursor.fetchall()
    enqueue_many([{"job_type": "worker.record", "payload": {"label": str(i)}} for i in range(200)])
    for claimed in (3, 6, 9):
        jobs = storage.claim("default", owner="t", limit=3)
        assert len(jobs) == 3
        assert Job.objects.filter(status=JobStatus.PROCESSING).count() == claimed
    assert Job.objects.filter(waiting=True).count() == 200 - 9


def test_complete_many__one_statement_and_a_lost_lease_is_not_written(
    django_assert_num_queries: Any,
) -> None:
    for i in range(3):
        enqueue_job(None, "worker.record", {"label": str(i)})
    first, stolen, last = storage.claim("default", owner="t", limit=3)
    with django_assert_num_queries(STATEMENTS[connection.vendor]):
        assert storage.complete_many([(first, {"n": 1})]) == [True]
    Job.objects.filter(pk=stolen.pk).update(lease_token="someone-else")
    assert storage.complete_many([(stolen, {"n": 2}), (last, None)]) == [False, True]
    rows = {j.pk: j for j in Job.objects.all()}
    assert rows[first.pk].status == JobStatus.DONE
    assert rows[first.pk].result == {"n": 1}
    assert rows[first.pk].lease_token == ""
    assert rows[stolen.pk].status == JobStatus.PROCESSING
    assert rows[stolen.pk].result is None
    assert rows[last.pk].status == JobStatus.DONE
    assert rows[last.pk].result is None


def test_complete_many__results_holds_and_keys_of_a_mixed_batch() -> None:
    # One flush: results of every JSON kind (None is SQL NULL), an id kept by its
    # job type's dedupe, an id freed, an until_executed key freed, a lost lease.
    from datetime import timedelta

    from django.utils import timezone

    from tests.testapp.jobtypes.ids import draft, plain

    draft.add("d", id="kept")  # dedupe 1 hour
    plain.add("p", id="freed")  # no dedupe
    keyed = enqueue_job("default", "worker.record", {}, unique_key="k")
    # until_executed is Pro: set on the row, as a licensed enqueue would have written it.
    Job.objects.filter(jid=keyed.jid).update(unique_mode="until_executed")
    for i in range(3):
        enqueue_job("default", "worker.record", {"label": str(i)})
    jobs = []
    for queue in ("ids", "ids-plain", "default"):
        jobs += storage.claim("default", owner="t", limit=10, queues=[queue])
    assert len(jobs) == 6
    Job.objects.filter(pk=jobs[-1].pk).update(lease_token="stolen")
    results: list[Any] = [{"a": [1, "é", None]}, None, 'text, with "quotes"', 0, [], "x"]
    flags = storage.complete_many(list(zip(jobs, results, strict=True)))
    assert flags == [True, True, True, True, True, False]
    rows = {job.pk: Job.objects.get(pk=job.pk) for job in jobs}
    for job, result in zip(jobs[:5], results[:5], strict=True):
        row = rows[job.pk]
        assert (row.status, row.result, row.lease_token) == (JobStatus.DONE, result, "")
        assert row.finished_at is not None
    assert Job.objects.filter(pk=jobs[1].pk, result__isnull=True).exists()  # SQL NULL
    kept, freed, keyed = rows[jobs[0].pk], rows[jobs[1].pk], rows[jobs[2].pk]
    assert kept.job_id_hash is not None
    assert kept.id_held_until > timezone.now() + timedelta(minutes=59)
    assert freed.job_id_hash is None
    assert keyed.unique_key is not None and keyed.unique_key_hash is None
    assert rows[jobs[-1].pk].status == JobStatus.PROCESSING


def test_foreman__a_claim_never_exceeds_free_slots_plus_prefetch() -> None:
    for i in range(30):
        enqueue_job(None, "worker.record", {"label": str(i)})
    run = foreman(concurrency=3, prefetch=1)
    assert run.run(install_signals=False) == {"done": 30}
    assert 1 < run.largest_claim <= 3 + 1  # batches formed, none over the bound
    assert RunRecord.objects.count() == 30


def test_foreman__a_claim_ahead_holds_no_more_than_the_prefetch_when_every_slot_is_busy() -> None:
    """A runner that takes the last held job claims ahead; its own slot is not free,
    so with no other free slot that claim takes the prefetch alone: the foreman leases
    at most concurrency + prefetch jobs (it took one more before)."""
    for i in range(10):
        enqueue_job(None, "worker.record", {"label": str(i)})
    run = foreman(concurrency=1, prefetch=1)
    run.type_run_ms["worker.record"] = 1.0  # a short job type: its jobs may be prefetched
    first = run._next_job("w")  # claims 2: this slot's job and one held
    assert first is not None and len(run._inbox) == 1
    assert storage.complete(first.job, None)
    run._unregister(first)
    second = run._next_job("w")  # takes the held job and claims ahead
    assert second is not None
    assert len(run._inbox) <= 1
    assert Job.objects.filter(status=JobStatus.PROCESSING).count() <= 1 + 1


def test_foreman__default_prefetch__grows_with_short_jobs_only() -> None:
    # The default prefetch takes more jobs per claim while the recent jobs were short
    # (as many as fit in HOLD_MS across the slots), and none once they are long: a
    # held job would then wait a whole job's time. The short jobs do nothing, so
    # they stay short on a loaded machine (a job that writes a row did not always).
    from django_jobqueue.worker.options import HOLD_MS, MIN_EXTRA_CAP

    for i in range(120):
        enqueue_job(None, "maint.noop", {"label": str(i)})
    short = foreman(concurrency=2)
    assert short.run(install_signals=False) == {"done": 120}
    assert 2 + 1 < short.largest_claim <= 2 + 1 + MIN_EXTRA_CAP  # 2 slots: 3 each is less
    assert Job.objects.filter(job_type="maint.noop", status=JobStatus.DONE).count() == 120

    for _ in range(12):
        enqueue_job(None, "worker.sleep", {"s": (HOLD_MS * 2 * 3) / 1000})
    slow = foreman(concurrency=2)
    assert slow.run(install_signals=False) == {"done": 12}
    assert slow.largest_claim <= 2 + 1
    assert slow.recent_run_ms > HOLD_MS * 2  # longer than the hold across the 2 slots


@pytest.mark.parametrize(
    ("concurrency", "cap"),
    [(1, 64), (4, 64), (21, 64), (22, 66), (24, 72)],  # 3 per slot, or 64 in all if more
)
def test_foreman__default_prefetch__at_most_3_per_slot_or_64_in_all(
    concurrency: int, cap: int
) -> None:
    """The default prefetch's cap, with the budget's fit far above it (no-op jobs)
    and no take rate known yet; the take rate then lowers it (half the hold time's
    worth of the foreman's recent pace)."""
    from django_jobqueue.worker.options import MAX_EXTRA_PER_SLOT, MIN_EXTRA_CAP

    assert (MAX_EXTRA_PER_SLOT, MIN_EXTRA_CAP) == (3, 64)
    run = foreman(concurrency=concurrency)
    assert run._prefetch_now() == 0  # no short job type known yet: no prefetch
    run.type_run_ms["maint.noop"] = 0.01
    run.recent_run_ms = 0.01  # fits 2 ms x slots / 0.01 ms: 200 per slot
    assert run._prefetch_now() == cap
    run.take_rate = 2.0  # jobs per ms: 2 x hold time 10 ms / 2 = 10
    assert run.hold_ms == 10
    assert run._prefetch_now() == 10


def test_foreman__a_set_prefetch_holds_no_more_than_the_slots_start_in_the_hold(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``--prefetch N`` is a most (README "Prefetch"): jobs of 20 ms at 2 slots start
    about 0.1 a ms, so of 200 held for the hold time (10 ms) nearly all would go back
    unstarted, claim after claim (about 870 hand-backs for these 60 jobs). Once the
    first claim's went back, the foreman holds what starts in half the hold time at
    the pace it saw: a few, or none (not even one would start) but one every 8th
    claim to measure the pace again."""
    for _ in range(60):
        enqueue_job(None, "starts.nap", {"s": 0.02})
    run = foreman(concurrency=2, prefetch=200)
    assert run.hold_ms == 10
    run.type_run_ms["starts.nap"] = 20.0  # known short: the first claim holds 58
    with caplog.at_level(logging.INFO, logger="django_jobqueue.worker.claims"):
        assert run.run(install_signals=False) == {"done": 60}
    went_back = [
        int(record.getMessage().rsplit("=", 1)[1])
        for record in caplog.records
        if "went back" in record.getMessage()
    ]
    assert went_back and went_back[0] >= 50  # the first claim's, before the pace was known
    assert sum(went_back[1:]) <= 200, went_back  # before, about 810
    assert Job.objects.filter(status=JobStatus.DONE, attempt=1).count() == 60


def test_foreman__the_take_rate__its_samples_and_what_it_holds() -> None:
    """The pace that bounds either prefetch (docs/prefetch.md, "The pace"), noted from a
    claim's landing (its mark: the time, the jobs taken and the prefetched ones taken
    so far) to the inbox running empty or held jobs going back."""
    run = foreman(concurrency=4, prefetch=500, prefetch_ms=20)
    assert run.hold_ms == 100
    run.type_run_ms["maint.noop"] = 0.01
    assert run._prefetch_now() == 500  # the pace not known yet: the set prefetch
    # Windows of a second or more: a pause of this test's thread changes little.
    # 15,000 jobs taken in 1 s, 14,000 of them prefetched: 15 a ms, 750 in half the hold.
    run._take_mark = (time.monotonic() - 1.0, 0, 0)
    run._taken_count, run._prefetched_taken = 15_000, 14_000
    run._note_take_rate()
    assert 13 < run.take_rate <= 15 and run._take_mark is None
    assert run._prefetch_now() == 500
    # Held jobs went back, 50 of them taken in 1 s: halfway down to 0.05 a ms at once.
    before = run.take_rate
    run._take_mark = (time.monotonic() - 1.0, 15_000, 14_000)
    run._taken_count, run._prefetched_taken = 15_100, 14_050
    run._note_take_rate(went_back=True)
    assert (before + 0.04) / 2 < run.take_rate <= (before + 0.05) / 2
    # Only jobs for free slots taken since the mark: nothing to tell, the mark stays.
    mark = (time.monotonic(), 15_100, 14_050)
    run._take_mark, before = mark, run.take_rate
    run._taken_count = 15_200
    run._note_take_rate()
    assert run._take_mark == mark and run.take_rate == before
    # Otherwise a fifth of the way per claim (8 a ms now) ...
    run._take_mark = (time.monotonic() - 1.0, 15_200, 14_050)
    run._taken_count, run._prefetched_taken = 23_200, 22_000
    run._note_take_rate()
    assert before * 0.8 + 1.5 < run.take_rate <= before * 0.8 + 1.6
    # ... but at most doubled by one, however fast its held jobs were taken.
    run.take_rate = 0.1
    run._take_mark = (time.monotonic() - 1.0, 23_200, 22_000)
    run._taken_count, run._prefetched_taken = 33_200, 32_000
    run._note_take_rate()
    assert run.take_rate == 0.2
    # Slower than one start in half the hold: none held, but one every 8th claim.
    run.take_rate = 0.001
    held = []
    for claims in range(16):
        run.claims = claims
        held.append(run._prefetch_now())
    assert held == [1, 0, 0, 0, 0, 0, 0, 0] * 2


def test_foreman__a_held_job_put_back_for_a_runner_counts_once() -> None:
    """The event loop takes a held job it cannot start and puts it back for a runner
    (the foreman's async side): the take rate counts the runner's take only."""
    for _ in range(3):
        enqueue_job(None, "worker.record", {"label": "held"})
    run = foreman(concurrency=1, prefetch=2)
    run.type_run_ms["worker.record"] = 1.0  # short: the claim holds 2
    first = run._next_job("w")
    assert first is not None and len(run._inbox) == 2
    held = run._take_held()
    assert held is not None and held.hold_until
    assert (run._taken_count, run._prefetched_taken) == (1, 1)
    run._put_back(held)
    assert (run._taken_count, run._prefetched_taken) == (0, 0)
    assert run._inbox[0] is held and not held.taken
    assert run._take_held() is held
    assert (run._taken_count, run._prefetched_taken) == (1, 1)


def test_foreman__a_failed_claim__early_or_not__loses_no_held_job(monkeypatch: Any) -> None:
    # A runner that takes the last held job claims the next batch before running
    # it; when that claim fails, its job still runs and nothing stays leased.
    from django.db import OperationalError

    from django_jobqueue.worker import claims

    real, calls = storage.claim, []

    def flaky(*args: Any, **kwargs: Any) -> list[Job]:
        calls.append(1)
        if len(calls) in (2, 3):
            raise OperationalError("claim failed (test)")
        return real(*args, **kwargs)

    monkeypatch.setattr(claims.storage, "claim", flaky)
    for i in range(40):
        enqueue_job(None, "worker.record", {"label": str(i)})
    run = foreman(concurrency=3)
    assert run.run(install_signals=False) == {"done": 40}
    assert Job.objects.filter(status=JobStatus.DONE, attempt=1).count() == 40
    assert len(calls) > 3


def test_foreman__a_batch_keeps_the_per_type_limit() -> None:
    worker_jobs.limited_max = 0
    for _ in range(8):
        enqueue_job(None, "worker.limited", {"s": 0.02})
    for i in range(4):
        enqueue_job(None, "worker.record", {"label": str(i)})
    run = foreman(concurrency=4, prefetch=2)
    assert run.run(install_signals=False) == {"done": 12}
    assert worker_jobs.limited_max == 1
    assert Job.objects.filter(status=JobStatus.DONE, attempt=1).count() == 12


def test_foreman__priority_order_holds_across_batches() -> None:
    for i in range(6):
        enqueue_job(None, "worker.record", {"label": f"low{i}"}, priority=200)
    for i in range(6):
        enqueue_job(None, "worker.record", {"label": f"high{i}"}, priority=1)
    assert foreman(concurrency=1, prefetch=2).run(install_signals=False) == {"done": 12}
    order = list(RunRecord.objects.order_by("id").values_list("label", flat=True))
    assert order == [f"high{i}" for i in range(6)] + [f"low{i}" for i in range(6)]
