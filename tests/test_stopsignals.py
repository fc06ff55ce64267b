"""SIGTERM/SIGINT reach the foreman and the gateway worker outside the signal handler.

Python runs a handler in the main thread between two of its bytecodes. The main
thread of a foreman waits on an ``Event`` every dispatcher tick, and the gateway
worker's on its stop event; a handler that set that event itself deadlocked when the
signal landed while the main thread held the event's lock (on its way in or out of
``wait()``): the process never exited. Each test here raises the signal in exactly
that state. ``signal.raise_signal`` runs the Python handler before it returns, so the
state is not a race. Were the handler to take the lock again, the test would hang:
``faulthandler`` then dumps every thread's stack and ends the run after 60 s.
"""

from __future__ import annotations

import contextlib
import faulthandler
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from django_jobqueue.client.worker import Worker
from django_jobqueue.core.stopsignals import SignalRelay, stop_signals_blocked
from django_jobqueue.worker.foreman import Foreman, ForemanOptions


@pytest.fixture(autouse=True)
def _hang_guard() -> Iterator[None]:
    faulthandler.dump_traceback_later(60, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def test_relay__a_signal_raised_while_the_main_thread_holds_the_events_lock_is_delivered():
    stopped = threading.Event()
    got: list[int] = []

    def on_signal(signum: int) -> None:
        got.append(signum)
        stopped.set()

    relay = SignalRelay(on_signal)
    assert relay.install()
    try:
        with stopped._cond:  # noqa: SLF001 - what Event.wait() holds on its way in and out
            signal.raise_signal(signal.SIGTERM)
            assert not stopped.is_set()  # the callback waits for the lock, in its thread
        assert stopped.wait(10)
        assert got == [signal.SIGTERM]
    finally:
        relay.close()


def test_relay__close_puts_the_previous_handlers_back():
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    relay = SignalRelay(lambda signum: None)
    assert relay.install()
    assert signal.getsignal(signal.SIGTERM) != before[signal.SIGTERM]
    relay.close()
    assert {s: signal.getsignal(s) for s in before} == before
    relay.close()  # twice is harmless


def test_relay__from_another_thread_installs_nothing():
    relay = SignalRelay(lambda signum: None)
    result: list[bool] = []
    thread = threading.Thread(target=lambda: result.append(relay.install()))
    thread.start()
    thread.join()
    assert result == [False]
    assert signal.getsignal(signal.SIGTERM) is not relay._on_signal  # noqa: SLF001


@contextlib.contextmanager
def relayed_to(callback: Callable[[int], None]) -> Iterator[None]:
    """SIGTERM/SIGINT relayed to ``callback`` for the block, as ``run()`` installs it."""
    relay = SignalRelay(callback)
    assert relay.install()
    try:
        yield
    finally:
        relay.close()


def raise_holding(event: threading.Event, signum: int) -> None:
    """Raise ``signum`` while this (main) thread holds ``event``'s lock, as it does on
    its way in and out of ``event.wait()``."""
    with event._cond:  # noqa: SLF001 - the lock Event.wait() holds
        signal.raise_signal(signum)


@pytest.mark.django_db(transaction=True)
def test_foreman__sigterm_while_its_dispatcher_holds_the_wake_events_lock_stops_it():
    foreman = Foreman(ForemanOptions(concurrency=1))
    # The dispatcher's tick is _dispatch_wake.wait(); stop() sets that event.
    wake = foreman._dispatch_wake  # noqa: SLF001
    with relayed_to(foreman._handle_signal):  # noqa: SLF001
        raise_holding(wake, signal.SIGTERM)
        assert wake.wait(10)
        assert foreman.stopping
        assert not foreman._forced.is_set()  # noqa: SLF001 - the first signal drains
        raise_holding(wake, signal.SIGINT)
        assert foreman._forced.wait(10)  # noqa: SLF001 - the second one forces


def test_gateway_worker__sigterm_while_it_holds_its_stop_events_lock_stops_it():
    worker = Worker(
        {"gw.echo": lambda payload, ctx: payload},
        client=object(),  # type: ignore[arg-type] - never called: the worker is not run
        queues=["default"],
        install_signals=True,
        name="py-signal-test",
    )
    # The worker's pauses are _stop.wait(); stop() sets that event.
    with relayed_to(worker._on_signal):  # noqa: SLF001
        raise_holding(worker._stop, signal.SIGTERM)  # noqa: SLF001
        assert worker._stop.wait(10)  # noqa: SLF001


def _sleep_in_child(seconds: float) -> None:
    time.sleep(seconds)


def test_relay__a_forked_child_does_not_inherit_it():
    """A job's multiprocessing child (fork) terminated by its parent dies of the
    SIGTERM, as without a relay, and the parent's relay hears nothing of it."""
    got: list[int] = []
    relay = SignalRelay(got.append)
    assert relay.install()
    try:
        child = multiprocessing.get_context("fork").Process(target=_sleep_in_child, args=(30,))
        child.start()
        time.sleep(0.2)  # past the fork hooks
        child.terminate()
        child.join(10)
        assert child.exitcode == -signal.SIGTERM
        time.sleep(0.2)
        assert got == []
    finally:
        relay.close()


@pytest.mark.django_db(transaction=True)
def test_foreman__a_run_that_fails_to_start_puts_the_handlers_back(monkeypatch):
    before = signal.getsignal(signal.SIGTERM)
    threads_before = {t.name for t in threading.enumerate()}
    foreman = Foreman(ForemanOptions(concurrency=1))

    def bad_schedules() -> None:
        raise RuntimeError("a bad SCHEDULES")

    monkeypatch.setattr(foreman, "_sync_schedules", bad_schedules)
    with pytest.raises(RuntimeError, match="a bad SCHEDULES"):
        foreman.run()
    assert signal.getsignal(signal.SIGTERM) == before
    for _ in range(50):
        if "jq-signals" not in {t.name for t in threading.enumerate()} - threads_before:
            break
        time.sleep(0.1)
    assert "jq-signals" not in {t.name for t in threading.enumerate()} - threads_before


def _child_that_handles_its_signals_late(startup_s: float) -> None:
    """A supervisor's child: a slow start, then its own relay, then the signals."""
    time.sleep(startup_s)  # a SIGTERM sent now must wait, not go anywhere else
    heard = threading.Event()
    relay = SignalRelay(lambda signum: heard.set())
    relay.install()  # unblocks them: the SIGTERM held back arrives
    try:
        os._exit(0 if heard.wait(5) else 3)  # noqa: SLF001 - the child's verdict
    finally:
        relay.close()


def test_blocked_signals__a_child_started_in_the_block_gets_its_sigterm_once_it_handles_it():
    """As the supervisor starts a foreman: the parent's relay installed, the fork
    inside stop_signals_blocked. A SIGTERM sent while the child starts reaches the
    child's own relay once installed, not the parent's (inherited) one."""
    got: list[int] = []
    relay = SignalRelay(got.append)
    assert relay.install()
    try:
        with stop_signals_blocked():
            child = multiprocessing.get_context("fork").Process(
                target=_child_that_handles_its_signals_late, args=(0.5,)
            )
            child.start()
        os.kill(child.pid, signal.SIGTERM)
        child.join(20)
        assert child.exitcode == 0, child.exitcode
        time.sleep(0.2)
        assert got == []
    finally:
        relay.close()
