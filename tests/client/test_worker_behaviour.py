"""The Ruby, PHP and Crystal workers against a live gateway: what each stores for a
handler that fails (retried, with its ``exception_class``), fails for good (dead
letter), crashes, outlives its ``timeout_ms``, is cancelled while running
(``cancel_requested``), returns an empty object, and how it stops on SIGTERM while a
job runs: the job finishes and is reported, the worker name is stopped, exit 0.

Each worker runs this repository's handlers (``clients/<lang>/test/``) through the
language's own worker: ``bin/jobqueue-worker --handlers`` for Ruby and PHP, a compiled
program for Crystal. Like the conformance suite, only scripts/test's ``clients`` leg
(``JOBQUEUE_TEST_CLIENTS=1``) runs it, with the toolchains installed; a missing one fails.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_jobqueue.client import Client
from django_jobqueue.models import Job, JobStatus, Worker
from tests.workers_helpers import ROOT

from .live import live_gateway

pytestmark = [pytest.mark.clients, pytest.mark.django_db(transaction=True)]

CLIENTS = ROOT / "clients"
JOB_TYPE = "behave.run"
SERVER_JOBQUEUE = {
    "LEASE_MS": 30_000,
    "HEARTBEAT_MS": 300,
    "GATEWAY": {"CLAIM_POLL_MS": 100, "JOB_TYPES": {JOB_TYPE: {"queue": "behave", "max_retry": 1}}},
}
#: Seconds the outcomes (and a build) may take on a loaded machine.
TIMEOUT_S = 180
BUILD_TIMEOUT_S = 900
#: The exception class each language reports for the handler's "fail" and "crash".
FAILS = {
    "ruby": ("ArgumentError", "NoMemoryError"),
    "php": ("DomainException", "ProcessExited"),
    "crystal": ("ArgumentError", "IndexError"),
}
PERMANENT = {
    "ruby": "JobQueue::PermanentFailure",
    "php": "DjangoJobQueue\\Client\\PermanentFailure",
    "crystal": "JobQueue::PermanentFailure",
}


@pytest.fixture(autouse=True)
def _clients_leg_only() -> None:
    if not os.environ.get("JOBQUEUE_TEST_CLIENTS"):
        pytest.skip("the clients' workers run in scripts/test's clients leg only")


@pytest.fixture(scope="module")
def gateway(django_db_setup: None, django_db_blocker: object) -> Iterator[str]:
    with django_db_blocker.unblock(), live_gateway(SERVER_JOBQUEUE) as url:  # type: ignore[attr-defined]
        yield url


def _command(lang: str, queue: str, tmp_path: Path) -> list[str]:
    """The worker's command line; builds the Crystal program first."""
    if lang == "crystal":
        crystal = shutil.which("crystal")
        assert crystal, "no crystal: apt-get install crystal (scripts/system-packages crystal)"
        binary = tmp_path / "behaviour-worker"
        built = subprocess.run(  # noqa: S603
            [crystal, "build", "--no-color", "test/behaviour_worker.cr", "-o", str(binary)],
            cwd=CLIENTS / "crystal", capture_output=True, text=True,
            timeout=BUILD_TIMEOUT_S, check=False,
        )  # fmt: skip
        assert built.returncode == 0, f"crystal build failed:\n{built.stdout}{built.stderr}"
        return [str(binary), queue]
    tool = {"ruby": "ruby", "php": "php"}[lang]
    assert shutil.which(tool), f"no {tool}: scripts/system-packages {lang}"
    handlers = {"ruby": "behaviour_jobs.rb", "php": "behaviour_jobs.php"}[lang]
    return [
        tool, str(CLIENTS / lang / "bin" / "jobqueue-worker"),
        "--handlers", str(CLIENTS / lang / "test" / handlers),
        "--queues", queue, "--concurrency", "8",
    ]  # fmt: skip


def _wait(what: str, done: Callable[[], bool], worker: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        assert worker.poll() is None, (
            f"the worker exited while waiting for {what}:\n{log.read_text()}"
        )
        assert time.monotonic() < deadline, f"no {what} in {TIMEOUT_S} s:\n{log.read_text()}"
        time.sleep(0.2)


@pytest.mark.parametrize("lang", ["ruby", "php", "crystal"])
def test_worker_outcomes_and_sigterm_drain(lang, gateway, make_token, tmp_path):
    queue = f"behave-{lang}"
    command = _command(lang, queue, tmp_path)
    token = make_token()
    with Client(gateway, make_token(("produce", "read", "admin"))) as jq:

        def enqueue(payload: dict[str, object], **options: object) -> str:
            return jq.enqueue(JOB_TYPE, payload, queue=queue, **options).jid

        fail = enqueue({"mode": "fail"})
        permanent = enqueue({"mode": "permanent"})
        crash = enqueue({"mode": "crash"})
        timeout = enqueue({"mode": "slow", "seconds": 60}, timeout_ms=1500)
        cancel = enqueue({"mode": "slow", "seconds": 60})
        empty = enqueue({"mode": "empty"})
        env = {**os.environ, "JQ_URL": gateway, "JQ_TOKEN": token}
        log = tmp_path / "worker.log"
        with log.open("w") as out:
            worker = subprocess.Popen(  # noqa: S603 (our worker, our arguments)
                command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
            )
            try:

                def status(jid: str) -> str:
                    return Job.objects.get(jid=jid).status

                _wait(
                    "a running cancel job",
                    lambda: status(cancel) == JobStatus.PROCESSING,
                    worker,
                    log,
                )
                assert jq.cancel(cancel).cancel_requested
                first = (fail, permanent, crash, timeout, cancel, empty)

                def reported() -> bool:
                    return all(
                        status(jid) != JobStatus.PROCESSING and Job.objects.get(jid=jid).attempt
                        for jid in first
                    )

                _wait("the first outcomes", reported, worker, log)
                slow = enqueue({"mode": "slow", "seconds": 4})
                _wait(
                    "a running slow job", lambda: status(slow) == JobStatus.PROCESSING, worker, log
                )
                worker.send_signal(signal.SIGTERM)
                # A claim in flight at the signal may still take this one: then it runs.
                late = enqueue({"mode": "empty"})
                code = worker.wait(timeout=TIMEOUT_S)
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
        output = log.read_text()
        assert code == 0, f"exit status {code}:\n{output}"

        jobs = {
            jid: Job.objects.get(jid=jid)
            for jid in (fail, permanent, crash, timeout, cancel, empty, slow)
        }
        # SIGTERM while the slow job ran: it finished and was reported before the exit.
        assert (jobs[slow].status, jobs[slow].result) == (JobStatus.DONE, {"slept": 4}), output
        assert (jobs[empty].status, jobs[empty].result) == (JobStatus.DONE, {}), output
        # Never held past the exit: run and reported, or left for the next worker.
        assert Job.objects.get(jid=late).status in (JobStatus.DONE, JobStatus.INIT), output
        assert jobs[cancel].status == JobStatus.CANCELLED, output
        fail_class, crash_class = FAILS[lang]
        for jid, exception_class in (
            (fail, fail_class),
            (crash, crash_class),
            (timeout, "TimeoutError"),
        ):
            error = jq.get_job(jid).last_error
            assert error is not None, (jid, output)
            assert error.exception_class == exception_class, (error, output)
            # Retried with backoff (max_retry 1: a second failure is a dead letter).
            assert jobs[jid].status in (JobStatus.RETRY, JobStatus.MAX_RETRY), (
                jobs[jid].status,
                output,
            )
        assert "bad thing" in jq.get_job(fail).last_error.message
        # A permanent failure is a dead letter at its first attempt.
        assert (jobs[permanent].status, jobs[permanent].attempt) == (JobStatus.ERROR, 1), output
        assert jq.get_job(permanent).last_error.exception_class == PERMANENT[lang]
    # No claim left behind, and the clean exit stopped the worker's name.
    assert not Job.objects.filter(queue=queue, status=JobStatus.PROCESSING).exists(), output
    mine = [w for w in Worker.objects.all() if queue in (w.queues or [])]
    assert mine, output
    assert all(w.stopped_at is not None for w in mine), output
