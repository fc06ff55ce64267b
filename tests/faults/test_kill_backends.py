"""Kill every worker session mid-drain, on each fault server."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.faults.conftest import ROOT, FaultDatabase

pytestmark = pytest.mark.faults

COUNT = 200


def runs_recorded(fault_db: FaultDatabase) -> int:
    rows = fault_db.server.execute("SELECT count(*) FROM testapp_runrecord", database=fault_db.name)
    return int(rows[0][0])


def test_kill_every_worker_backend_mid_drain__none_lost_none_left_processing(
    fault_db: FaultDatabase,
) -> None:
    jids = fault_db.helper("enqueue", str(COUNT), "0.05")
    proc = subprocess.Popen(  # noqa: S603
        [
            sys.executable,
            "-m",
            "django",
            "runworkers",
            "--burst",
            "--concurrency",
            "4",
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
        env=fault_db.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while runs_recorded(fault_db) < COUNT // 4:
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
    print(f"\n{fault_db.server.vendor}: killed {killed} sessions; {twice} jobs ran twice")  # noqa: T201
    assert set(runs) >= set(jids), "a job never ran"
    assert report["statuses"].get("processing", 0) == 0, report["statuses"]
    assert report["statuses"] == {"done": COUNT}, (report["statuses"], stderr[-3000:])
