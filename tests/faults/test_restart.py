"""Restart the database server mid-drain, on each fault server.

2,000 ``worker.record`` jobs, 2 processes x 4 threads, a lease of 10 s and a restart
of about 2.5 s once a quarter ran (``scripts/start-fault-servers restart``), measured
and checked to be shorter than the lease. No job may be lost, none left
``processing``, no result lost.

Double runs: a job runs twice only when its handler's work committed (its RunRecord)
and its attempt then ended without its result: its outcome was never stored (the
lease expires, the reaper hands the job back) or its handler met the restart (its
failure is stored); it runs again, as attempt 2. runworkers' completer writes its batches of
successes (up to 64) again through an outage, 0.1 s to 1 s apart, until the batch's
earliest lease is a second from expiry, so an outage shorter than the lease strands
none; before it did, one failed write stranded a whole batch (6 to 41 double runs
on PostgreSQL, 0 to 3 on MariaDB). Measured since: 0 on both. What can still run
twice is a job whose handler's own statement met the restart after its work
committed (its answer lost): the handler fails, its failure is stored once the
server is back (runworkers writes an outcome that is not batched again through an
outage too), and it runs again as attempt 2 after its backoff: at most one per
worker thread. The test asserts that bound, and that every double run is attempt 1
then attempt 2, the second started after the first ended (its failure stored, or
its lease expired and the reaper took it: then at least a lease apart): never two
owners at once. Every other job is safe: a claim whose answer was lost is found
again under its lease token (or reaped and run once), a prefetched job the restart
caught is still unrun, and heartbeats resume before the 10 s lease runs out.

At the high-throughput layout (tests.workers_helpers.HIGH_THROUGHPUT_ARGS: 2 x 12
threads, a prefetch of up to 500 held at most 100 ms, a retention of zero): 4,000
jobs, the restart once 200 ran, so it meets claims holding prefetched jobs. Half the
jobs are ``worker.sleep`` of 0 s, whose result is None: their rows are deleted at
their end (docs/design.md#retention), so the test asserts that no job is left
``processing`` or waiting, that some rows went, and that the ``worker.record`` rows
stay ``done`` with their results; a double run of such a job is checked by its
RunRecords alone, its row being gone. The bound on double runs is the same: one per
worker thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from tests.faults.conftest import FaultDatabase, stop_workers, wait_until
from tests.workers_helpers import HIGH_THROUGHPUT_ARGS, HIGH_THROUGHPUT_JOBQUEUE

pytestmark = pytest.mark.faults

LEASE_MS = 10_000

#: What a handler whose own statement meets the restart raises.
DATABASE_ERRORS = {"django.db.utils.OperationalError", "django.db.utils.InterfaceError"}

#: Jobs not yet ended: waiting, running or to retry (a done job's row may be gone).
LEFT_SQL = "SELECT count(*) FROM django_jobqueue_job WHERE status <> 'done'"
RUNS_SQL = "SELECT count(*) FROM testapp_runrecord"


@dataclass(frozen=True)
class Layout:
    """runworkers' options, the workers' JOBQUEUE and the jobs of one run."""

    args: tuple[str, ...]
    #: Processes x threads: the most jobs that may run twice.
    slots: int
    #: Jobs enqueued, and how many had run when the restart began.
    count: int
    restart_after: int
    #: How many of them are ``worker.sleep`` of 0 s (the rest ``worker.record``).
    noop: int = 0
    jobqueue: dict[str, object] = field(default_factory=dict)


LAYOUTS = {
    "2x4": Layout(("--processes", "2", "--concurrency", "4"), 8, 2_000, 500),
    # Drains at thousands of jobs a second: the restart begins once both foremen
    # prefetch (a type is short after its first runs), with most jobs still to run.
    "high-throughput": Layout(
        HIGH_THROUGHPUT_ARGS, 24, 4_000, 200, noop=2_000, jobqueue=HIGH_THROUGHPUT_JOBQUEUE
    ),
}


@pytest.mark.parametrize("layout", list(LAYOUTS.values()), ids=list(LAYOUTS))
def test_restart_mid_drain__none_lost_none_left_processing_no_result_lost(
    fault_db: FaultDatabase, tmp_path: Path, layout: Layout
) -> None:
    records = fault_db.helper("enqueue-record", str(layout.count - layout.noop))
    noops = fault_db.helper("enqueue", str(layout.noop), "0") if layout.noop else []
    jids = records + noops
    log = tmp_path / "workers.log"
    proc = fault_db.start_workers(
        *layout.args,
        "--lease", str(LEASE_MS),
        "--ramp-time", "0",
        "--min-sleep", "5",
        "--max-sleep", "200",
        log=log,
        jobqueue=layout.jobqueue,
    )  # fmt: skip
    try:
        wait_until(
            lambda: (fault_db.count(RUNS_SQL) or 0) >= layout.restart_after,
            f"{layout.restart_after} runs",
            120,
            proc,
        )
        started = time.monotonic()
        fault_db.server.restart()
        outage_s = time.monotonic() - started
        assert outage_s * 1000 < LEASE_MS, f"the restart took {outage_s:.1f} s"
        left_after = fault_db.count(LEFT_SQL)
        wait_until(lambda: fault_db.count(LEFT_SQL) == 0, "every job ended", 150, proc)
    finally:
        stop_workers(proc)

    report = fault_db.helper("report")
    runs = report["runs"]
    twice = sorted(jid for jid in jids if runs.get(jid, 0) > 1)
    kept_noops = report["done_types"].get("worker.sleep", 0)
    print(  # noqa: T201 (the figures, shown with pytest -s)
        f"\n{fault_db.server.vendor}: restart {outage_s:.1f} s mid-drain of {layout.count} jobs "
        f"({left_after} left after it); {len(twice)} ran twice ({sum(runs.values())} runs); "
        f"{kept_noops} of {layout.noop} rows of no-result jobs kept"
    )
    assert set(runs) == set(jids), "a job never ran"
    # None waiting or running; each worker.record job done with its result.
    assert set(report["statuses"]) == {"done"}, (report["statuses"], log.read_text()[-3000:])
    assert report["done_types"]["worker.record"] == len(records)
    assert report["results_missing"] == 0
    if layout.noop:  # a retention of zero: their rows went (else the setting never arrived)
        assert kept_noops < layout.noop
    # Attempt 1 then attempt 2, never two owners at once: attempt 1 ended (its failure
    # stored, or its lease expired) before attempt 2 started.
    for jid, (first, second) in ((jid, report["doubles"][jid]) for jid in twice):
        assert (first[0], second[0]) == (1, 2), (jid, report["doubles"][jid])
        second_at = datetime.fromisoformat(second[2])
        assert datetime.fromisoformat(first[2]) < second_at, (jid, first, second)
        if jid not in report["errors"]:
            assert jid in noops, jid  # only a no-result job's row goes at its end
            continue
        ends = [e for e in report["errors"][jid] if e[0] == 1]
        assert ends, (jid, report["doubles"][jid], report["errors"][jid])
        _attempt, exception_class, message, at = ends[-1]
        assert datetime.fromisoformat(at) <= second_at, (jid, ends, second)
        if message.startswith("lease expired"):
            # The lease ran from its claim (or last beat), a moment before the first start.
            gap = second_at - datetime.fromisoformat(first[2])
            assert gap.total_seconds() >= LEASE_MS / 1000 - 2, (jid, first, second)
        else:  # the handler's own write met the outage; its failure was stored after it
            assert exception_class in DATABASE_ERRORS, (jid, ends)
    assert len(twice) <= layout.slots, twice
