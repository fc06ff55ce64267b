"""Kill the listener's session, then enqueue: the jobs start at once.

PostgreSQL only: MariaDB has no LISTEN/NOTIFY (its workers poll), so there is no
listener to kill there.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.faults.conftest import FaultDatabase, stop_workers, wait_until

pytestmark = pytest.mark.faults

BATCH = 10
#: The listener's catch-up bound is 1 s; the margin absorbs a loaded test machine.
PICKUP_BOUND_S = 1.5

LISTENERS_SQL = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "AND left(query, 6) = 'LISTEN' ORDER BY pid"
)


def listeners(fault_db: FaultDatabase) -> list[int]:
    try:
        return [int(pid) for (pid,) in fault_db.query(LISTENERS_SQL)]
    except Exception:  # noqa: BLE001 (the caller asks again)
        return []


def run_batch(fault_db: FaultDatabase, proc: subprocess.Popen[str], done_before: int) -> list[str]:
    """Enqueue BATCH jobs, wait until they are done; return their jids."""
    jids: list[str] = fault_db.helper("enqueue-record", str(BATCH))
    wait_until(
        lambda: (
            fault_db.count("SELECT count(*) FROM django_jobqueue_job WHERE status = 'done'")
            == done_before + BATCH
        ),
        "the batch done",
        60,
        proc,
    )
    return jids


@pytest.mark.parametrize("fault_server", ["postgresql"], indirect=True)
def test_kill_the_listener__jobs_enqueued_a_second_later_start_within_a_second(
    fault_db: FaultDatabase, tmp_path: Path
) -> None:
    """PostgreSQL only (MariaDB has no LISTEN). With ``--max-sleep 20000`` the idle
    workers' sleeps have grown to 6.4 s when the listener's backend is terminated
    (``pg_terminate_backend`` of the session whose query is ``LISTEN ...``); jobs
    enqueued 1 s later must still start within :data:`PICKUP_BOUND_S`, as they did
    before the kill. A listener that paused 5 s after losing its session and did not
    catch up made them wait for the end of a long sleep (3.7 s here)."""
    log = tmp_path / "workers.log"
    proc = fault_db.start_workers(
        "--concurrency", "4", "--max-sleep", "20000", "--lease", "10000", log=log
    )
    try:
        wait_until(lambda: len(listeners(fault_db)) == 1, "the LISTEN session", 60, proc)
        before = run_batch(fault_db, proc, 0)
        time.sleep(7)  # idle: the sleep doubles from 50 ms to 6.4 s
        (pid,) = listeners(fault_db)
        killed = fault_db.query("SELECT pg_terminate_backend(%s)", (pid,))
        assert killed == [(True,)]
        time.sleep(1)
        after = run_batch(fault_db, proc, BATCH)
        wait_until(lambda: listeners(fault_db) not in ([], [pid]), "a new LISTEN", 30, proc)
    finally:
        stop_workers(proc)

    pickup = fault_db.helper("report")["pickup_s"]
    slowest_before = max(pickup[jid] for jid in before)
    slowest_after = max(pickup[jid] for jid in after)
    print(  # noqa: T201 (the figures, shown with pytest -s)
        f"\nlistener killed: slowest pickup before {slowest_before * 1000:.0f} ms, "
        f"after {slowest_after * 1000:.0f} ms"
    )
    assert slowest_after < PICKUP_BOUND_S, (pickup, log.read_text()[-3000:])
