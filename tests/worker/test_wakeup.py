"""The listener's health and back-off, and the idle foreman's poll while it is down.

The listener itself losing its session (``pg_terminate_backend``) is a fault test:
tests/faults/test_listener.py, on the fault PostgreSQL server.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest
from django.db import connection
from django.test import override_settings

from django_jobqueue.models import Job
from django_jobqueue.worker import wakeup
from django_jobqueue.worker.foreman import Foreman, ForemanOptions
from tests.testapp.models import RunRecord
from tests.workers_helpers import ROOT, worker_env


def test_retry_pause__at_once_then_doubles_from_100_ms_up_to_5_s():
    pauses = [wakeup.retry_pause_s(n) for n in range(10)]
    assert pauses == [0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]
    assert wakeup.retry_pause_s(10_000) == wakeup.RETRY_MAX_S
    with pytest.raises(ValueError, match="failures"):
        wakeup.retry_pause_s(-1)


def test_listener_health__healthy_until_marked_down_and_back_up():
    health = wakeup.ListenerHealth()
    assert health.healthy
    health.mark_down()
    assert not health.healthy
    health.mark_up()
    assert health.healthy


@pytest.mark.django_db(transaction=True)
def test_listen__without_a_listener_returns_at_once_and_leaves_workers_sleeping():
    # NOTIFY off (or not PostgreSQL): nothing to listen to, and polling at the adaptive
    # sleep is the design, so health must not say "down".
    health = wakeup.ListenerHealth()
    calls: list[str] = []
    with override_settings(JOBQUEUE={"NOTIFY": False}):
        wakeup.listen("default", calls.append, threading.Event(), health)
    assert health.healthy
    assert calls == []


@pytest.mark.vendor("postgresql")
@pytest.mark.django_db(transaction=True)
def test_listen__a_successful_listen_wakes_every_idle_worker_for_a_catch_up_poll():
    health = wakeup.ListenerHealth()
    calls: list[str] = []
    stop = threading.Event()
    thread = threading.Thread(target=wakeup.listen, args=("default", calls.append, stop, health))
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while not calls and time.monotonic() < deadline:
            time.sleep(0.02)
        assert calls[:1] == [""]  # "": every queue
        assert health.healthy
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_idle_foreman__polls_at_min_sleep_while_the_listener_is_down():
    """An idle foreman whose sleep has grown to 6.4 s picks up a job enqueued by
    another process (so no in-process wake-up, and NOTIFY off: no wake-up at all)
    within 1.5 s, because its listener is down. Healthy, it would sleep on (about
    5 s here)."""
    with override_settings(JOBQUEUE={"NOTIFY": False}):
        foreman = Foreman(
            ForemanOptions(concurrency=1, min_sleep_ms=50, max_sleep_ms=20_000, ramp_time_ms=0)
        )
        foreman.listener.mark_down()  # what listen() does when its session is lost
        thread = threading.Thread(target=foreman.run, kwargs={"install_signals": False})
        thread.start()
        try:
            # Idle claims double the sleep: once it is 6.4 s, a healthy foreman has just
            # begun a 6.4 s sleep, which the enqueue below lands in.
            deadline = time.monotonic() + 30
            while foreman.governor.sleep_ms < 6_400 and time.monotonic() < deadline:
                time.sleep(0.01)
            proc = subprocess.run(  # noqa: S603 (our own interpreter and module)
                [sys.executable, "-m", "tests.faults.helpers", "enqueue-record", "1"],
                cwd=ROOT,
                env=worker_env(),
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            deadline = time.monotonic() + 30
            while not RunRecord.objects.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
        finally:
            foreman.stop()
            thread.join(30)
    job = Job.objects.get()
    started = RunRecord.objects.get(jid=job.jid).created_at
    pickup_s = (started - job.created_at).total_seconds()
    print(f"\n{connection.vendor}: pickup {pickup_s * 1000:.0f} ms with the listener down")  # noqa: T201
    assert pickup_s < 1.5
