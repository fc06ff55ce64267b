"""Helpers of tests/test_no_duplicate.py: racing threads and processes, lock probes.

Run as a script (``python -m tests.no_duplicate_helpers QUEUE JOB_ID``) it is one
racing creator process: it sets Django up against ``DATABASE_URL``, prints
``ready``, waits for a line on stdin (the starting gun) and prints one JSON line
with its outcome.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Contention figures of the runs, one line each, appended (never asserted on).
RESULTS_FILE = Path(os.environ.get("JOBQUEUE_NODUP_RESULTS", "/tmp/jobqueue-nodup-results.txt"))

JOB_TYPE = "nodup.noop"


@dataclass
class Race:
    """The outcomes of one race: one entry per racer, in racer order."""

    outcomes: list[Any] = field(default_factory=list)
    errors: list[BaseException] = field(default_factory=list)
    settle_s: float = 0.0


def race_threads(count: int, racer: Callable[[int], Any], *, using: str = "default") -> Race:
    """Start ``count`` threads that call ``racer(i)`` at once; return their outcomes.

    Every thread has its own database connection (Django's per-thread handler) and
    closes it, with its creation-lock connection, before it ends. ``settle_s`` is the
    wall clock from the starting gun to the last thread done.
    """
    from django.db import connections

    from django_jobqueue.store import locks

    barrier = threading.Barrier(count + 1)
    race = Race(outcomes=[None] * count)
    lock = threading.Lock()

    def run(i: int) -> None:
        try:
            connections[using].ensure_connection()
            barrier.wait()
            race.outcomes[i] = racer(i)
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            with lock:
                race.errors.append(exc)
            race.outcomes[i] = exc
        finally:
            getattr(locks, "close_lock_connections", lambda: None)()
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,), name=f"racer-{i}") for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.monotonic()
    for thread in threads:
        thread.join(timeout=120)
    race.settle_s = time.monotonic() - started
    assert not any(thread.is_alive() for thread in threads), "a racer never finished"
    return race


def record(what: str, vendor: str, settle_s: float, rows: int, callers: int) -> None:
    """Print and append one contention figure (a measurement, never asserted on)."""
    line = f"{vendor:<10} {what:<34} callers={callers:<3} rows={rows} settle_s={settle_s:.3f}"
    logger.warning("nodup %s", line)
    print(f"\n[nodup] {line}")
    with RESULTS_FILE.open("a", encoding="utf-8") as out:
        out.write(line + "\n")


def advisory_locks_in_database(using: str = "default") -> int:
    """Return how many advisory locks any session holds in this PostgreSQL database."""
    from django.db import connections

    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND d.datname = current_database()"
        )
        return int(cursor.fetchone()[0])


def _child(queue: str, job_id: str) -> int:
    import django

    django.setup()
    from django.db import connections

    from django_jobqueue.core.exceptions import DuplicateJob
    from django_jobqueue.enqueue import build_job, create_job
    from django_jobqueue.store import locks
    from django_jobqueue.store.registry import get_job_description

    get_job_description(JOB_TYPE)  # imports done before the gun, not timed
    connections["default"].ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()
    try:
        result = create_job(build_job(queue, JOB_TYPE, {"pid": os.getpid()}, job_id=job_id))
        outcome: dict[str, Any] = {"outcome": "created", "jid": result.jid}
    except DuplicateJob as exc:
        outcome = {"outcome": "duplicate", "jid": exc.holder_jid}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        outcome = {"outcome": "error", "error": f"{type(exc).__name__}: {exc}"}
    finally:
        getattr(locks, "close_lock_connections", lambda: None)()
        connections.close_all()
    print(json.dumps(outcome), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_child(sys.argv[1], sys.argv[2]))
