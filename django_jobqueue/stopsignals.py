"""SIGTERM and SIGINT, handled outside the signal handler.

Python runs a signal handler in the main thread, between two bytecodes of
whatever that thread was doing. A handler that takes a lock the main thread may
hold at that moment deadlocks the process for good: ``threading.Event.set()``
takes the event's own lock, which the main thread holds on its way in and out of
``Event.wait()``. A foreman's main thread waits on such an event every dispatcher
tick (10 ms), so a SIGTERM that lands in that window left ``runworkers`` running
forever, its jobs leased.

So the handler here takes no lock: it writes the signal's number to a pipe, and
a daemon thread reads it and calls the real callback (stop, log) as ordinary code.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["STOP_SIGNALS", "SignalRelay"]

logger = logging.getLogger(__name__)

#: The signals a worker stops on: the first drains, the second forces.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

_CLOSE = 0  # not a signal number: tells the relay thread to end


class SignalRelay:
    """Deliver SIGTERM/SIGINT to ``callback(signum)`` in a thread of its own.

    Parameters
    ----------
    callback:
        Called with the signal's number (an ``int``) once per signal received, in
        the ``jq-signals`` thread, never inside the signal handler. Its exceptions
        are logged, not raised.

    Use :meth:`install` in the main thread (elsewhere it does nothing and returns
    False) and :meth:`close` when done, which puts the previous handlers back.
    """

    def __init__(self, callback: Callable[[int], None]) -> None:
        self._callback = callback
        self._previous: dict[int, Any] = {}
        self._read_fd = -1
        self._write_fd = -1
        self._thread: threading.Thread | None = None

    def install(self) -> bool:
        """Handle :data:`STOP_SIGNALS` from now on; return whether it could.

        Only the main thread can set signal handlers: from another thread this
        installs nothing and returns False.
        """
        if threading.current_thread() is not threading.main_thread() or self._thread:
            return False
        self._read_fd, self._write_fd = os.pipe()
        os.set_blocking(self._write_fd, False)  # a full pipe drops, never blocks
        self._thread = threading.Thread(target=self._relay, name="jq-signals", daemon=True)
        self._thread.start()
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)
        return True

    def close(self) -> None:
        """Put the previous handlers back and end the relay thread."""
        if self._thread is None:
            return
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        self._send(_CLOSE)
        self._thread.join(timeout=2)
        self._thread = None
        for fd in (self._read_fd, self._write_fd):
            os.close(fd)
        self._read_fd = self._write_fd = -1

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # The signal handler: no lock, no logging, no allocation beyond the byte.
        self._send(signum)

    def _send(self, code: int) -> None:
        try:
            os.write(self._write_fd, bytes((code,)))
        except (BlockingIOError, OSError):
            pass  # 64 KiB of unread signals already say "stop"

    def _relay(self) -> None:
        while True:
            try:
                data = os.read(self._read_fd, 64)
            except OSError:
                return
            for code in data:
                if code == _CLOSE:
                    return
                try:
                    self._callback(code)
                except Exception:  # noqa: BLE001 - a signal must not kill the relay
                    logger.exception("handling signal %s failed", code)
