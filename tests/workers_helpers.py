"""Run real workers from tests: ``runworkers`` subprocesses, or a foreman in-process.

Subprocesses use the *test* database pytest-django created: their environment
carries ``DATABASE_URL`` pointing at it (see ``tests.conftest.database_url``), and
``JOBQUEUE_TEST_JOBQUEUE`` carries the test process's current ``JOBQUEUE`` setting
as JSON (so ``override_settings(JOBQUEUE=...)`` reaches them; tests/settings.py
reads it). Use them only in ``django_db(transaction=True)`` tests: a subprocess
sees committed rows only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings

from tests.conftest import database_url

__all__ = ["HIGH_THROUGHPUT_ARGS", "HIGH_THROUGHPUT_JOBQUEUE", "drain", "run_workers", "worker_env"]

ROOT = Path(__file__).resolve().parent.parent

#: runworkers' options of the high-throughput layout: 2 processes x 12 threads, no
#: line per success, a prefetch of up to 500 jobs beyond the free slots per claim,
#: held at most 5 x 20 = 100 ms before they go back unspent (docs/prefetch.md).
#: Its workers run with :data:`HIGH_THROUGHPUT_JOBQUEUE`; the reliability tests run at it too
#: (tests/faults, tests/worker/test_runworkers.py).
HIGH_THROUGHPUT_ARGS = (
    "--processes", "2",
    "--concurrency", "12",
    "--no-log-success",
    "--prefetch", "500",
    "--prefetch-ms", "20",
)  # fmt: skip
#: The ``JOBQUEUE`` of the high-throughput layout: a retention of zero, so a done
#: job's row is deleted by the batched completion unless something reads it after
#: its end (docs/design.md#retention).
HIGH_THROUGHPUT_JOBQUEUE: dict[str, object] = {"RETENTION": "0s"}


def worker_env(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Return the environment of a worker subprocess on the current test database."""
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "JOBQUEUE_TEST_JOBQUEUE": json.dumps(getattr(settings, "JOBQUEUE", {})),
        "PYTHONUNBUFFERED": "1",
        # A stuck worker is sent SIGABRT (see stop_process): every thread's stack to stderr.
        "PYTHONFAULTHANDLER": "1",
        **(env or {}),
    }


def run_workers(
    *args: str,
    timeout_s: float | None = 120,
    env: Mapping[str, str] | None = None,
    wait: bool = True,
    capture: bool = True,
) -> Any:
    """Run ``python -m django runworkers *args`` against the current test database.

    Parameters
    ----------
    *args:
        Command-line options, e.g. ``"--burst", "--concurrency", "8"``.
    timeout_s:
        With ``wait``: kill the process and raise ``subprocess.TimeoutExpired`` after
        this many seconds.
    env:
        Extra environment variables.
    wait:
        True: wait for the exit and return the ``subprocess.CompletedProcess``
        (``returncode``, ``stdout``, ``stderr`` as text). False: return the running
        ``subprocess.Popen`` at once (signal it with ``.send_signal``; its output goes
        to pipes when ``capture``, so read them with ``.communicate()``).
    capture:
        Capture stdout/stderr (else they go to the test's own streams).
    """
    command = [sys.executable, "-m", "django", "runworkers", *args]
    pipe = subprocess.PIPE if capture else None
    if wait:
        return subprocess.run(  # noqa: S603 (our own interpreter and command)
            command,
            cwd=ROOT,
            env=worker_env(env),
            stdout=pipe,
            stderr=pipe,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    process = subprocess.Popen(  # noqa: S603 (our own interpreter and command)
        command, cwd=ROOT, env=worker_env(env), stdout=pipe, stderr=pipe, text=True
    )
    STARTED.append(process)
    return process


#: Every ``runworkers`` started with ``wait=False``; tests/conftest.py aborts the ones
#: still running when their test ends (:func:`abort_leaked`), so a stuck worker cannot
#: claim a later test's jobs.
STARTED: list[subprocess.Popen[str]] = []


def abort_leaked() -> list[str]:
    """Abort every started ``runworkers`` still running; one report (pid, command, end
    of stderr with the thread stacks) per aborted process. Forgets them all."""
    readers = {id(w.process): w for w in _STARTED_WORKERS}
    reports = []
    for process in STARTED:
        if process.poll() is not None:
            continue
        abort_process(process)
        if id(process) in readers:
            worker = readers[id(process)]
            worker._close()
            err = "".join(worker.lines)
        else:
            err = process.communicate()[1] or ""
        reports.append(f"pid {process.pid} {' '.join(process.args)}:\n{err[-8000:]}")
    STARTED.clear()
    _STARTED_WORKERS.clear()
    return reports


def abort_process(process: subprocess.Popen[str], grace_s: float = 10) -> None:
    """End a stuck worker: SIGABRT (its faulthandler writes every thread's stack to its
    stderr, see :func:`worker_env`), then SIGKILL after ``grace_s`` seconds."""
    import signal

    if process.poll() is not None:
        return
    process.send_signal(signal.SIGABRT)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def stop_all(workers: Sequence[StartedWorkers], timeout_s: float = 120) -> list[tuple[int, str]]:
    """SIGTERM every one of ``workers`` at once, then wait for each; their (exit code,
    stderr). One that is still running after ``timeout_s`` seconds is aborted with its
    thread stacks (AssertionError), and the others are still stopped."""
    import signal

    for worker in workers:
        worker.process.send_signal(signal.SIGTERM)
    outcomes: list[tuple[int, str]] = []
    stuck: list[str] = []
    for worker in workers:
        try:
            outcomes.append(worker.stop(timeout_s=timeout_s, signalled=True))
        except AssertionError as exc:
            stuck.append(str(exc))
    assert not stuck, "\n\n".join(stuck)
    return outcomes


def drain(
    queues: Sequence[str] | None = None, concurrency: int = 4, **options: Any
) -> dict[str, int]:
    """Run a foreman in burst mode in this process until nothing is due or running.

    Parameters
    ----------
    queues:
        Queues to drain (None: every queue).
    concurrency:
        Worker threads.
    **options:
        Other :class:`~django_jobqueue.worker.foreman.ForemanOptions` fields
        (``lease_ms``, ``middleware``, ...).

    Returns
    -------
    dict[str, int]
        Outcomes stored by this foreman, by status (``{"done": 10, "retry": 2}``).
    """
    from django_jobqueue.worker.foreman import Foreman, ForemanOptions

    options.setdefault("min_sleep_ms", 5)
    options.setdefault("max_sleep_ms", 50)
    options.setdefault("ramp_time_ms", 0)
    foreman = Foreman(
        ForemanOptions(
            queues=tuple(queues) if queues else None,
            concurrency=concurrency,
            burst=True,
            **options,
        )
    )
    return foreman.run(install_signals=False)


_STARTED_WORKERS: list[StartedWorkers] = []


class StartedWorkers:
    """A running ``runworkers`` whose stderr is read by a thread, so its pipe never fills.

    :meth:`wait_started` returns once the foreman logged that it started (its signal
    handlers are installed by then), so a SIGTERM sent afterwards drains it instead of
    killing a process still importing Django.
    """

    def __init__(self, *args: str, env: Mapping[str, str] | None = None) -> None:
        import threading

        self.process = run_workers(*args, env=env, wait=False, capture=True)
        _STARTED_WORKERS.append(self)
        self.lines: list[str] = []
        self._started = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)
            if "foreman started" in line:
                self._started.set()

    def wait_started(self, timeout_s: float = 120) -> None:
        """Wait until the foreman started; AssertionError with its stderr if it did not."""
        assert self._started.wait(timeout_s), "".join(self.lines)

    def stop(self, timeout_s: float = 120, *, signalled: bool = False) -> tuple[int, str]:
        """SIGTERM it (unless ``signalled``: already sent, and a second would force),
        wait for the exit; return (exit code, stderr).

        Still running after ``timeout_s`` seconds: it is aborted, and AssertionError
        carries the end of its stderr with every thread's stack.
        """
        import signal

        if not signalled:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            abort_process(self.process)
            self._close()
            raise AssertionError(
                f"runworkers pid {self.process.pid} still running {timeout_s:.0f} s after"
                f" SIGTERM; its stderr ends:\n{''.join(self.lines)[-8000:]}"
            ) from None
        self._close()
        return self.process.returncode, "".join(self.lines)

    def _close(self) -> None:
        self._reader.join(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


def drain_once_each(processes: int, threads: int, count: int, *, timeout_s: float = 300) -> Any:
    """Enqueue ``count`` ``worker.record`` jobs, drain them with ``runworkers --burst``
    (``processes`` x ``threads``), check each ran exactly once, none was lost and none
    is left processing; return ``(process, elapsed_s)``.
    """
    import time

    from django.db import transaction

    from django_jobqueue import enqueue_job
    from django_jobqueue.models import Job, JobStatus
    from tests.testapp.models import RunRecord

    with transaction.atomic():
        jids = [enqueue_job(None, "worker.record", {"label": str(i)})["jid"] for i in range(count)]
    started = time.monotonic()
    proc = run_workers(
        "--burst",
        "--processes", str(processes),
        "--concurrency", str(threads),
        "--ramp-time", "0",
        "--min-sleep", "5",
        "--max-sleep", "100",
        "--verbosity", "0",
        timeout_s=timeout_s,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = list(RunRecord.objects.values_list("jid", flat=True))
    assert len(runs) == count  # each job ran exactly once
    assert set(runs) == set(jids)  # none lost
    assert Job.objects.filter(status=JobStatus.DONE).count() == count
    assert not Job.objects.processing().exists()  # none left processing
    return proc, elapsed
