"""Quiet outages and exits: a ``runworkers`` whose database becomes unreachable (a TCP
proxy the test closes) logs each failing step in one line, with no traceback; one
that stops while its database is unreachable or after its database was dropped logs
one warning for the statistics it could not write, and no traceback from its exit
path (the lines after its SIGTERM)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection, transaction

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from tests.conftest import database_url
from tests.workers_helpers import ROOT, StartedWorkers, worker_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.vendor("postgresql", "mysql")]


class Proxy:
    """A TCP proxy on 127.0.0.1 to ``(host, port)``; :meth:`close` ends every session
    through it and refuses new ones, as a network partition would."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            self.sockets += [client, server]
            if self.closed:  # closed meanwhile: this session ends with the others
                self.close()
                return
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.closed = True
        self.listener.close()
        for sock in self.sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


def wait_for(condition: Callable[[], bool], timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def behind_a_proxy(shutdown_timeout_ms: int, *args: str) -> tuple[Proxy, StartedWorkers]:
    """A ``runworkers`` on the test database through a TCP proxy the test can close,
    with ``args`` added to its command line; ``wait_started`` not called yet."""
    settings = connection.settings_dict
    proxy = Proxy(settings["HOST"] or "127.0.0.1", int(settings["PORT"]))
    url = database_url().replace(f":{settings['PORT']}/", f":{proxy.port}/")
    workers = StartedWorkers(
        "--concurrency", "2", "--min-sleep", "10", "--max-sleep", "50",
        "--shutdown-timeout", str(shutdown_timeout_ms), *args,
        env={"DATABASE_URL": url},
    )  # fmt: skip
    return proxy, workers


def exit_log_of(stopped: tuple[int, str]) -> str:
    """Return what stopped workers (``StartedWorkers.stop``'s answer) logged from their
    SIGTERM on, after checking they exited 0 with no traceback there."""
    code, log = stopped
    exit_log = log[log.index("SIGTERM: stopping") :]
    assert code == 0, log[-5000:]
    assert "Traceback" not in exit_log, exit_log[-8000:]
    return exit_log


def test_while_the_database_is_unreachable__each_failing_step_one_line() -> None:
    """Through an outage a worker tries its steps again every second or so: each
    failure is one line ending with the error's first line, never a traceback (which
    would say only that again, a few times a second, for as long as the outage
    lasts)."""
    proxy, workers = behind_a_proxy(2000, "--heartbeat", "200")
    try:
        workers.wait_started()
        proxy.close()
        time.sleep(3)  # the schedules' pass runs each second, the heartbeat 5 times
    finally:
        proxy.close()
        stopped = workers.stop()
    code, log = stopped
    assert code == 0, log[-5000:]
    assert "Traceback" not in log, log[log.index("Traceback") - 500 :][:8000]
    for step in ("materializing due schedules failed", "worker heartbeat failed name="):
        lines = [line for line in log.splitlines() if step in line]
        assert lines, log[-8000:]
        for line in lines:  # each names its reason: the error's first line
            assert ": database unreachable (" in line and line.rstrip().endswith(")"), line


def test_exit_while_the_database_is_unreachable__one_warning_no_traceback() -> None:
    proxy, workers = behind_a_proxy(2000)
    try:
        workers.wait_started()
        with transaction.atomic():
            jids = [enqueue_job(None, "maint.noop")["jid"] for _ in range(20)]
        wait_for(lambda: Job.objects.filter(jid__in=jids, status=JobStatus.DONE).count() == 20)
        proxy.close()  # the statistics of these jobs are not written yet (every 2 s)
        time.sleep(1)  # what the running worker logs about it comes before the stop
    finally:
        proxy.close()
        stopped = workers.stop()
    exit_log = exit_log_of(stopped)
    unwritten = [line for line in exit_log.splitlines() if "not written" in line]
    assert len(unwritten) == 1, exit_log[-8000:]
    assert "statistics" in unwritten[0]


def test_a_result_that_cannot_be_stored_at_exit__a_warning_no_traceback() -> None:
    """A job ends while the database is unreachable and stays so until the stop: its
    result waits in the batched writer, which gives up at the stop with one warning
    (the reaper takes the job back), not a traceback per attempt."""
    proxy, workers = behind_a_proxy(5000)
    try:
        workers.wait_started()
        jid = enqueue_job(None, "starts.nap", {"s": 1})["jid"]
        wait_for(lambda: Job.objects.get(jid=jid).started_at is not None)
        proxy.close()
        time.sleep(2)  # the nap ends meanwhile: its result cannot be stored
    finally:
        proxy.close()
        stopped = workers.stop()
    exit_log = exit_log_of(stopped)
    assert "1 results not stored" in exit_log, exit_log[-8000:]
    row = Job.objects.get(jid=jid)
    assert row.status == JobStatus.PROCESSING  # not stored: its lease ends, the reaper's


def test_exit_after_the_database_was_dropped__one_warning_no_traceback() -> None:
    """A scratch database (migrated here) that the worker uses is dropped under it: on
    PostgreSQL with ``FORCE`` (its sessions end), on MariaDB while its session lives."""
    name = f"{connection.settings_dict['NAME']}_dropped"
    quoted = connection.ops.quote_name(name)
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quoted}")
        cursor.execute(f"CREATE DATABASE {quoted}")
    url = database_url().rsplit("/", 1)[0] + f"/{name}"
    try:
        migrated = subprocess.run(  # noqa: S603 (our own interpreter and command)
            [sys.executable, "-m", "django", "migrate", "--noinput", "-v", "0"],
            cwd=ROOT,
            env=worker_env({"DATABASE_URL": url}),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        workers = StartedWorkers("--concurrency", "2", env={"DATABASE_URL": url})
        try:
            workers.wait_started()
            with connection.cursor() as cursor:
                force = " WITH (FORCE)" if connection.vendor == "postgresql" else ""
                cursor.execute(f"DROP DATABASE {quoted}{force}")
            time.sleep(1)  # what the running worker logs about it comes before the stop
        finally:
            code, log = workers.stop()
    finally:
        with connection.cursor() as cursor:
            force = " WITH (FORCE)" if connection.vendor == "postgresql" else ""
            cursor.execute(f"DROP DATABASE IF EXISTS {quoted}{force}")
    exit_log = log[log.index("SIGTERM: stopping") :]
    assert code == 0, log[-5000:]
    assert "Traceback" not in exit_log, exit_log[-8000:]
    unwritten = [line for line in exit_log.splitlines() if "not written" in line]
    assert len(unwritten) == 1, exit_log[-8000:]
    assert "statistics" in unwritten[0]
