"""Kill every worker session mid-drain, on each fault server.

``worker.sleep`` jobs of 50 ms, drained by ``runworkers --burst`` with a lease of
5 s: 200 jobs on one process of 4 threads, and 1,000 at the high-throughput layout
(tests.workers_helpers.HIGH_THROUGHPUT_ARGS: 2 x 12 threads, a prefetch of up to 500
held at most 100 ms, a retention of zero, so the done jobs' rows are deleted:
docs/design.md#retention). Every job runs, none is left waiting or ``processing``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.faults.conftest import ROOT, FaultDatabase
from tests.workers_helpers import HIGH_THROUGHPUT_ARGS, HIGH_THROUGHPUT_JOBQUEUE

pytestmark = pytest.mark.faults

#: runworkers' options, the workers' JOBQUEUE and the jobs enqueued, by layout.
LAYOUTS = {
    "1x4": (("--concurrency", "4"), {}, 200),
    "high-throughput": (HIGH_THROUGHPUT_ARGS, HIGH_THROUGHPUT_JOBQUEUE, 1_000),
}


def runs_recorded(fault_db: FaultDatabase) -> int:
    rows = fault_db.server.execute("SELECT count(*) FROM testapp_runrecord", database=fault_db.name)
    return int(rows[0][0])


@pytest.mark.parametrize(("args", "jobqueue", "count"), list(LAYOUTS.values()), ids=list(LAYOUTS))
def test_kill_every_worker_backend_mid_drain__none_lost_none_left_processing(
    fault_db: FaultDatabase, args: tuple[str, ...], jobqueue: dict[str, object], count: int
) -> None:
    jids = fault_db.helper("enqueue", str(count), "0.05")
    proc = subprocess.Popen(  # noqa: S603
        [
            sys.executable,
            "-m",
            "django",
            "runworkers",
            "--burst",
            *args,
            "--lease",
            "5000",
            "--ramp-time",
            "0",
            "--min-sleep",
            "5",
            "--max-sleep",
            "100",
            "--verbosity",
            "0",
        ],
        cwd=ROOT,
        env=fault_db.env(jobqueue=jobqueue),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while runs_recorded(fault_db) < count // 4:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the drain never got a quarter through"
            time.sleep(0.05)
        killed = fault_db.server.kill_backends(fault_db.name)
        assert killed > 0  # the worker's sessions, mid-drain
        _, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    report = fault_db.helper("report")
    runs = report["runs"]
    twice = sum(1 for jid in jids if runs.get(jid, 0) > 1)
    kept = report["statuses"].get("done", 0)
    print(  # noqa: T201
        f"\n{fault_db.server.vendor}: killed {killed} sessions; {twice} jobs ran twice; "
        f"{kept} done rows kept"
    )
    assert set(runs) >= set(jids), "a job never ran"
    assert report["statuses"].get("processing", 0) == 0, report["statuses"]
    if jobqueue:  # a retention of zero: done rows go, and no row is left otherwise
        assert set(report["statuses"]) <= {"done"}, (report["statuses"], stderr[-3000:])
        assert kept < count
    else:
        assert report["statuses"] == {"done": count}, (report["statuses"], stderr[-3000:])
