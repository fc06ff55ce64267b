"""The one-runner wake-up: no job waits out an idle runner's
long sleep while the foreman could have polled or was told about it."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.db import connection

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import rawinsert
from django_jobqueue.worker.foreman import Foreman, ForemanOptions
from tests.testapp.models import RunRecord

pytestmark = pytest.mark.django_db(transaction=True)


def foreman(**options: Any) -> Foreman:
    options.setdefault("min_sleep_ms", 5)
    options.setdefault("ramp_time_ms", 0)
    return Foreman(ForemanOptions(**options))


def _started(label: str, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if RunRecord.objects.filter(label=label).exists():
            return time.monotonic()
        time.sleep(0.01)
    return None


def _warm_up(f: Foreman, n: int) -> None:
    """Spawn ``n`` slots (n short jobs at once), then let their sleeps grow long."""
    for i in range(n):
        enqueue_job(None, "worker.sleep", {"s": 0.3, "label": f"warm{i}"})
    deadline = time.monotonic() + 20
    while RunRecord.objects.filter(label__startswith="warm").count() < n:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    time.sleep(3)  # every runner now sleeps seconds at a time


@pytest.mark.vendor("postgresql")
def test_listener_down__every_idle_runner_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    """When the LISTEN session is lost, listen() marks the health down and calls
    on_wakeup("") "so sleeping workers go over to polling at MIN_SLEEP_MS". That
    wake-up must reach every idle runner, not one: else a job enqueued while the one
    woken runner is busy waits out another runner's long sleep (MAX_SLEEP_MS)."""
    f = foreman(concurrency=3, max_sleep_ms=8000, shutdown_timeout_ms=3000)
    thread = threading.Thread(target=f.run, kwargs={"install_signals": False})
    thread.start()
    try:
        _warm_up(f, 3)
        # What listen() does when its session is lost.
        f.listener.mark_down()
        f.wake("")
        # From now on the enqueues are unheard (another process, no NOTIFY).
        monkeypatch.setattr(rawinsert, "wakes_by_notify", lambda using, conn=None: False)
        monkeypatch.setattr(rawinsert, "wake_local", lambda using, conn=None: None)
        enqueue_job(None, "worker.sleep", {"s": 2.5, "label": "long"})
        assert _started("long", 2) is not None  # the woken runner polls and takes it
        sent = time.monotonic()
        enqueue_job(None, "worker.record", {"label": "short"})
        started = _started("short", 10)
        assert started is not None
        assert started - sent < 1.0, f"picked up after {started - sent:.2f} s"
    finally:
        f.stop(force=True)
        thread.join(30)
    assert not thread.is_alive()


@pytest.mark.parametrize("rounds", [6])
def test_enqueues_from_threads_while_runners_go_idle_are_picked_up_promptly(rounds: int) -> None:
    """Bursts from several threads, each landing while runners finish, claim and go
    idle: every job starts well under the idle sleep (MAX_SLEEP_MS 8 s)."""
    f = foreman(concurrency=4, max_sleep_ms=8000, shutdown_timeout_ms=3000)
    thread = threading.Thread(target=f.run, kwargs={"install_signals": False})
    thread.start()
    worst = 0.0
    try:
        _warm_up(f, 4)
        for r in range(rounds):
            labels: list[str] = []

            def burst(t: int, r: int = r, labels: list[str] = labels) -> None:
                for i in range(5):
                    label = f"r{r}t{t}i{i}"
                    labels.append(label)
                    s = 0.02 if i % 2 else 0
                    enqueue_job(None, "worker.sleep", {"s": s, "label": label})
                    time.sleep(0.003 * ((t + i) % 4))
                connection.close()

            sent = time.monotonic()
            threads = [threading.Thread(target=burst, args=(t,)) for t in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            deadline = sent + 10
            while RunRecord.objects.filter(label__startswith=f"r{r}t").count() < len(labels):
                if time.monotonic() > deadline:
                    break
                time.sleep(0.005)
            worst = max(worst, time.monotonic() - sent)
            assert RunRecord.objects.filter(label__startswith=f"r{r}t").count() == len(labels)
            time.sleep(0.5 + 0.37 * r)  # idle a varying while: sleeps grow
    finally:
        f.stop()
        thread.join(30)
    assert not thread.is_alive()
    assert worst < 2.0, f"a burst took {worst:.2f} s"
    assert not Job.objects.filter(status=JobStatus.PROCESSING).exists()
