"""SIGTERM and SIGINT, handled outside the signal handler.

Python runs a signal handler in the main thread, between two bytecodes of whatever
that thread was doing. A handler that takes a lock the main thread may hold at that
moment deadlocks the process: ``threading.Event.set()`` takes the event's own lock,
which the main thread holds on its way in and out of ``Event.wait()`` (the worker's
loop waits on its stop event). So the handler here takes no lock: it writes the
signal's number to a pipe, and a daemon thread reads it and calls the real callback
(stop, log) as ordinary code.

A process forked while a relay is installed (a handler's ``multiprocessing`` child)
does not inherit it: the child has no relay thread, so its handlers go back to what
they were and it closes its copies of the pipe.

The Django app has the same relay for ``runworkers`` (``django_jobqueue.core.stopsignals``);
this client is a distribution of its own that imports nothing of the app.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "SignalRelay"]

logger = logging.getLogger(__name__)

#: The signals a worker stops on.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_CLOSE = 0  # not a signal number: tells the relay thread to end

_INSTALLED: weakref.WeakSet[SignalRelay] = weakref.WeakSet()


class SignalRelay:
    """Deliver SIGTERM/SIGINT to ``callback(signum)`` in a thread of its own.

    Parameters
    ----------
    callback:
        Called with the signal's number (an ``int``) once per signal received, in the
        ``jq-signals`` thread, never inside the signal handler. Its exceptions are
        logged, not raised.

    Use :meth:`install` in the main thread (elsewhere it does nothing and returns
    False) and :meth:`close` when done, which puts the previous handlers back.
    """

    def __init__(self, callback: Callable[[int], None]) -> None:
        self._callback = callback
        self._previous: dict[int, Any] = {}
        self._read_fd = -1  # closed by the relay thread (or a forked child) only
        self._write_fd = -1
        self._thread: threading.Thread | None = None

    def install(self) -> bool:
        """Handle :data:`STOP_SIGNALS` from now on; return whether it could (only the
        main thread can set signal handlers, and only once per relay)."""
        if threading.current_thread() is not threading.main_thread() or self._thread:
            return False
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # a full pipe drops, never blocks
        self._thread = threading.Thread(
            target=self._relay, args=(self._read_fd,), name="jq-signals", daemon=True
        )
        self._thread.start()
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        _INSTALLED.add(self)
        return True

    def close(self) -> None:
        """Put the previous handlers back and end the relay thread."""
        if self._thread is None:
            return
        _INSTALLED.discard(self)
        self._restore_handlers()
        self._send(_CLOSE)
        os.close(self._write_fd)  # EOF for the thread, should the byte be dropped
        self._write_fd = -1
        self._thread.join(timeout=2)  # longer only while the callback runs
        self._thread = None

    def _restore_handlers(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _forget_in_child(self) -> None:
        with contextlib.suppress(ValueError, OSError):
            self._restore_handlers()
        if self._thread is not None:
            self._thread = None
            for fd in (self._read_fd, self._write_fd):
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._read_fd = self._write_fd = -1

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # The signal handler: no lock, no logging, nothing but the byte.
        self._send(signum)

    def _send(self, code: int) -> None:
        try:
            os.write(self._write_fd, bytes((code,)))
        except OSError:  # BlockingIOError included: unread signals already say "stop"
            pass

    def _relay(self, read_fd: int) -> None:
        try:
            while True:
                try:
                    data = os.read(read_fd, 64)
                except InterruptedError:
                    continue
                except OSError:
                    return
                if not data:
                    return  # the write end is closed
                for code in data:
                    if code == _CLOSE:
                        return
                    try:
                        self._callback(code)
                    except Exception:
                        logger.exception("handling signal %s failed", code)
        finally:
            os.close(read_fd)


def _after_fork_in_child() -> None:
    for relay in list(_INSTALLED):
        relay._forget_in_child()
    _INSTALLED.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
