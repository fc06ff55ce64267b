"""The supervisor: N foreman processes under one parent (``runworkers --processes N``).

The parent closes its database connections, then starts N child processes
(``fork`` where the platform has it, else ``spawn``); each child closes whatever
connections it inherited and runs one :class:`~django_jobqueue.worker.foreman.Foreman`.
A child that crashes (exits non-zero or by a signal the parent did not send) is
restarted after a pause; in burst mode a child that exits 0 has drained and is
not restarted, and the parent returns when every child has. SIGTERM/SIGINT to the
parent is passed to every child (first: drain, second: force). A child whose parent
has gone (killed outright) drains and exits as on SIGTERM. Each child sends its
outcome counts to the parent on a pipe of its own, for ``runworkers``' final line.
"""

from __future__ import annotations

import collections
import gc
import logging
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

import django
from django.apps import apps
from django.db import connections

from ..core.conf import get_config
from ..core.stopsignals import SignalRelay, stop_signals_blocked
from .logsetup import add_default_handler

if TYPE_CHECKING:
    from .foreman import Foreman

__all__ = ["Supervisor", "tune_collector"]

logger = logging.getLogger(__name__)

_RESTART_PAUSE_S = 1.0
#: A burst child that crashes this many times makes the supervisor give up.
_BURST_MAX_CRASHES = 5
#: How often (s) a child looks whether its supervisor is still there.
_PARENT_POLL_S = 0.5


def tune_collector() -> None:
    """Set this worker process's young-generation collection threshold to
    ``JOBQUEUE["WORKER_GC_THRESHOLD"]`` (0: leave Python's own).

    A claim makes hundreds of job instances that live until their jobs end. At
    Python's threshold (container objects allocated, less those freed: 2,000 from
    Python 3.13, 700 before) the collector ran every few dozen jobs and walked the
    claim's live jobs each time: about a tenth of a no-op drain's GIL-held time on
    3.13 (README "Speed"). The older generations keep their thresholds, so cycles
    are still freed, a few hundred claims later. Set in the worker's process only
    (not in :meth:`Foreman.run`): a foreman run inside another program leaves that
    program's collector alone.
    """
    threshold = get_config().WORKER_GC_THRESHOLD
    if threshold:
        gc.set_threshold(threshold, *gc.get_threshold()[1:])


def _watch_parent(parent_pid: int, foreman: Foreman) -> None:
    """In a child: stop ``foreman`` once the supervisor ``parent_pid`` has gone.

    A supervisor killed outright (SIGKILL, an OOM kill) passes no signal on; its
    children, each in its own process group, would run on unsupervised. They drain
    instead, as on SIGTERM, within :data:`_PARENT_POLL_S` of the loss; one that
    already drains goes on draining (a second stop would force).
    """
    while os.getppid() == parent_pid:
        time.sleep(_PARENT_POLL_S)
    if not foreman.stopping:
        logger.warning("the supervisor (pid %s) has gone: stopping", parent_pid)
        foreman.stop()


def _child_main(
    options: dict[str, Any], log_level: int, report: Connection, parent_pid: int
) -> None:
    if not apps.ready:  # spawn start method: a fresh interpreter
        django.setup()
    if hasattr(os, "setpgrp"):
        # Terminal Ctrl-C reaches the parent only, which passes it on once.
        os.setpgrp()
    # A forked child must not use (or close over the wire) its parent's sockets.
    for conn in connections.all(initialized_only=True):
        conn.connection = None
    connections.close_all()
    logging.getLogger("django_jobqueue").setLevel(log_level)
    # A forked child inherits the parent's handlers; a spawned one configured the
    # project's LOGGING afresh in django.setup() and may need the default handler.
    add_default_handler()

    # deferred: a spawned child imports this module before django.setup() above
    from .foreman import Foreman, ForemanOptions, exit_past_stuck_handlers

    tune_collector()
    foreman = Foreman(ForemanOptions(**options))
    threading.Thread(
        target=_watch_parent, args=(parent_pid, foreman), name="jq-parent", daemon=True
    ).start()
    # The parent started this child with SIGTERM/SIGINT blocked: one sent meanwhile
    # waits, and reaches the relay run() installs, not a handler inherited by the fork.
    stats = foreman.run()
    # Its own pipe, not a queue shared by the children: a child killed mid-write
    # then takes no lock with it that another child's report would wait on.
    report.send(stats)
    report.close()
    exit_past_stuck_handlers(foreman)


class Supervisor:
    """Run ``processes`` foremen in child processes and restart those that crash.

    Parameters
    ----------
    processes:
        Number of child processes, >= 1.
    options:
        Keyword arguments of :class:`~django_jobqueue.worker.foreman.ForemanOptions`
        for every child.
    log_level:
        Level of the ``django_jobqueue`` logger in the children.

    Implements: docs/design.md#execution.
    """

    def __init__(self, processes: int, options: dict[str, Any], *, log_level: int) -> None:
        self.processes = processes
        self.options = options
        self.log_level = log_level
        methods = multiprocessing.get_all_start_methods()
        self._mp: Any = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
        self._children: dict[int, BaseProcess] = {}
        self._reports: dict[int, Connection] = {}
        #: Jobs the children stored an outcome for, by status, summed over every
        #: child that returned (a crashed or killed child reports nothing).
        self.stats: collections.Counter[str] = collections.Counter()
        self._stopping = threading.Event()
        self._signals_received = 0  # by the relay thread
        self._signals_passed_on = 0  # by the main thread
        self._crashes = [0] * processes

    def _start(self, index: int) -> None:
        connections.close_all()
        receive, send = self._mp.Pipe(duplex=False)
        process = self._mp.Process(
            target=_child_main,
            args=(self.options, self.log_level, send, os.getpid()),
            name=f"jq-foreman-{index}",
            daemon=False,
        )
        # Blocked from the fork until the child's foreman handles them, and here
        # until the child is in _children: a signal of that window is not lost.
        with stop_signals_blocked():
            process.start()
            self._children[index] = process
        send.close()  # the child's end: EOF here once the child has gone
        self._reports[index] = receive
        logger.info("foreman process started index=%d pid=%s", index, process.pid)
        self._pass_signals_on()

    def _collect(self, index: int) -> None:
        """Add the stats the child ``index`` sent before it exited, if it did."""
        receive = self._reports.pop(index, None)
        if receive is None:
            return
        try:
            if receive.poll():
                self.stats.update(receive.recv())
        except (EOFError, OSError):
            pass  # crashed or killed before its report: nothing to add
        finally:
            receive.close()

    def _handle_signal(self, signum: int) -> None:
        # In the relay's thread (never inside the signal handler); the main thread
        # passes it on within its 0.1 s tick.
        self._signals_received += 1
        self._stopping.set()

    def _pass_signals_on(self) -> None:
        """Send every child one SIGTERM per signal received and not yet passed on."""
        while self._signals_passed_on < self._signals_received:
            self._signals_passed_on += 1
            for process in self._children.values():
                if process.is_alive() and process.pid is not None:
                    try:
                        os.kill(process.pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass

    def run(self) -> int:
        """Run the children until they all return (burst) or a signal; return an exit code.

        Returns
        -------
        int
            0 when every child exited cleanly, 1 when a burst child kept crashing.
        """
        burst = bool(self.options.get("burst"))
        relay = SignalRelay(self._handle_signal)
        finished: set[int] = set()
        code = 0
        try:
            relay.install()
            for index in range(self.processes):
                self._start(index)
            while True:
                self._pass_signals_on()
                for index, process in list(self._children.items()):
                    if index in finished or process.is_alive():
                        continue
                    process.join()
                    self._collect(index)
                    exitcode = process.exitcode
                    if self._stopping.is_set() or (burst and exitcode == 0):
                        finished.add(index)
                        continue
                    self._crashes[index] += 1
                    logger.error(
                        "foreman process crashed index=%d pid=%s exitcode=%s; restarting",
                        index,
                        process.pid,
                        exitcode,
                    )
                    if burst and self._crashes[index] >= _BURST_MAX_CRASHES:
                        finished.add(index)
                        code = 1
                        continue
                    time.sleep(_RESTART_PAUSE_S)
                    if not self._stopping.is_set():
                        self._start(index)
                if len(finished) == len(self._children) or (
                    self._stopping.is_set()
                    and not any(p.is_alive() for p in self._children.values())
                ):
                    break
                time.sleep(0.1)
        finally:
            relay.close()
            for index, process in self._children.items():
                if index in self._reports and not process.is_alive():
                    process.join()
                    self._collect(index)  # those that ended after the loop's last look
        return code
