"""The Python client as its own distribution, in a virtualenv without Django.

A fresh virtualenv (the stdlib ``venv`` module) gets ``clients/python`` installed from
this checkout, which brings httpx and nothing else: ``import django`` fails there.
Then, against a live gateway on the test database: the client's own tests
(clients/python/tests, stdlib ``unittest``) pass there, and its ``jobqueue-worker``
command, started from that virtualenv as a real process, drains jobs enqueued on the
test database, reports its version, and on SIGTERM finishes and reports the jobs it
is running, then exits 0.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import venv
from collections.abc import Callable
from pathlib import Path

import pytest

from django_jobqueue import enqueue_job
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.models import Worker as WorkerRow
from tests.workers_helpers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

CLIENT_DIR = ROOT / "clients" / "python"
QUEUE = "nodj"
#: Seconds for a pip install, a process start or a drain on a loaded machine.
TIMEOUT_S = 240

#: The handlers the command runs: each appends "start <jid>" and "end <jid>" to the
#: record file (around a 1.5 s sleep for a payload with "slow") and returns its payload.
HANDLERS = textwrap.dedent(
    """
    import os
    import time

    RECORD = os.environ["JQ_TEST_RECORD"]


    def echo(payload, ctx):
        with open(RECORD, "a") as out:
            out.write(f"start {ctx.jid}\\n")
        if payload.get("slow"):
            time.sleep(1.5)
        with open(RECORD, "a") as out:
            out.write(f"end {ctx.jid}\\n")
        return payload


    HANDLERS = {"gw.echo": echo}
    """
)


def _client_key() -> str:
    """A hash of clients/python's files (bar caches) and of this interpreter."""
    digest = hashlib.sha256(sys.version.encode())
    for path in sorted(CLIENT_DIR.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and ".egg-info" not in str(path):
            digest.update(str(path.relative_to(CLIENT_DIR)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@pytest.fixture(scope="session")
def bare_venv() -> Path:
    """A virtualenv with clients/python (and so httpx) installed, and nothing more.

    Made once per content of clients/python and interpreter, under the temporary
    directory, and shared by the runs and database legs that ask for the same one (a
    lock file serialises them, and a venv counts once its ``complete`` mark is
    written): making one takes a minute on a loaded machine.
    """
    home = Path(tempfile.gettempdir()) / "jobqueue-client-venvs"
    home.mkdir(exist_ok=True)
    path = home / _client_key()
    complete = path / "complete"
    with (home / f"{path.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if complete.exists():
            return path
        venv.EnvBuilder(with_pip=True, clear=True).create(path)  # clear: a half-made one
        subprocess.run(  # noqa: S603 (our venv's pip, our checkout)
            [
                str(path / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                str(CLIENT_DIR),
            ],
            check=True,
            timeout=TIMEOUT_S,
            capture_output=True,
        )
        complete.write_text(str(CLIENT_DIR) + "\n")
    return path


def bare_env(**extra: str) -> dict[str, str]:
    """An environment with no Django settings, no PYTHONPATH and no database URL."""
    return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **extra}


def wait_until(predicate: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_bare_venv__has_the_client_and_httpx_but_no_django(bare_venv):
    python = str(bare_venv / "bin" / "python")
    no_django = subprocess.run(  # noqa: S603
        [python, "-c", "import django"], env=bare_env(), capture_output=True, text=True
    )
    assert no_django.returncode == 1
    assert "ModuleNotFoundError: No module named 'django'" in no_django.stderr
    listed = subprocess.run(  # noqa: S603
        [python, "-m", "pip", "list", "--format=freeze", "--disable-pip-version-check"],
        env=bare_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    names = {line.split("==")[0].lower() for line in listed.split()}
    assert {"django-jobqueue-client", "httpx"} <= names
    assert not {n for n in names if n.startswith("django") and n != "django-jobqueue-client"}


def test_client_tests__pass_in_the_bare_venv(bare_venv, gateway_url, make_token, tmp_path):
    """clients/python/tests, run by unittest from the bare venv, none skipped: the
    live ones talk to this module's gateway."""
    done = subprocess.run(  # noqa: S603
        [
            str(bare_venv / "bin" / "python"),
            "-m",
            "unittest",
            "discover",
            "--start-directory",
            str(CLIENT_DIR / "tests"),
            "--verbose",
        ],
        cwd=tmp_path,
        env=bare_env(JQ_TEST_URL=gateway_url, JQ_TEST_TOKEN=make_token()),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    ran = re.search(r"^Ran (\d+) tests? in", done.stderr, re.MULTILINE)
    assert ran is not None and int(ran.group(1)) >= 10, done.stderr
    assert done.stderr.rstrip().endswith("OK"), done.stderr  # no "(skipped=N)"
    # The package under test is the bare venv's installed copy, not the source tree.
    assert (
        str(bare_venv)
        in subprocess.run(  # noqa: S603
            [
                str(bare_venv / "bin" / "python"),
                "-c",
                "import jobqueue_client; print(jobqueue_client.__file__)",
            ],
            cwd=tmp_path,
            env=bare_env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


def test_worker_command__drains_jobs_then_stops_on_sigterm(
    bare_venv, gateway_url, make_token, tmp_path
):
    fast = [enqueue_job(QUEUE, "gw.echo", {"n": n}, max_retry=0).jid for n in range(10)]
    (tmp_path / "handlers.py").write_text(HANDLERS)
    record = tmp_path / "record.txt"
    record.touch()
    stderr_path = tmp_path / "worker.err"
    site_root = gateway_url.removesuffix("/sdk")  # the root, as the TypeScript CLI takes it
    with stderr_path.open("w") as stderr:
        process = subprocess.Popen(  # noqa: S603
            [
                str(bare_venv / "bin" / "jobqueue-worker"),
                "--handlers",
                "handlers:HANDLERS",
                "--queues",
                QUEUE,
                "--concurrency",
                "2",
                "--wait-ms",
                "1000",
                "--name",
                "py-bare-venv",
            ],  # fmt: skip
            cwd=tmp_path,
            env=bare_env(JQ_URL=site_root, JQ_TOKEN=make_token(), JQ_TEST_RECORD=str(record)),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        wait_until(lambda: "registered py-bare-venv" in stderr_path.read_text(), "its start")
        wait_until(
            lambda: Job.objects.filter(jid__in=fast, status=JobStatus.DONE).count() == len(fast),
            "the first jobs drained",
        )
        slow = [
            enqueue_job(QUEUE, "gw.echo", {"n": n, "slow": True}, max_retry=0).jid for n in range(6)
        ]
        wait_until(
            lambda: sum(record.read_text().count(f"start {jid}") for jid in slow) >= 2,
            "two slow jobs started",
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(TIMEOUT_S) == 0, stderr_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

    err = stderr_path.read_text()
    version = importlib.metadata.version("django-jobqueue-client")
    start = next(line for line in err.splitlines() if "registered py-bare-venv" in line)
    assert start.startswith(
        f"jobqueue-worker: registered py-bare-venv: queues={QUEUE} job_types=gw.echo "
        f"concurrency=2 (django-jobqueue-client {version} at {gateway_url},"
    ), err
    for fast_jid in fast:
        job = Job.objects.get(jid=fast_jid)
        assert (job.status, job.result) == (JobStatus.DONE, job.payload)

    lines = record.read_text().split()
    started = {jid for word, jid in zip(lines[0::2], lines[1::2], strict=True) if word == "start"}
    ended = {jid for word, jid in zip(lines[0::2], lines[1::2], strict=True) if word == "end"}
    assert started == ended  # every job it began, it finished
    began_slow = started & set(slow)
    assert 2 <= len(began_slow) < len(slow)
    done = set(Job.objects.filter(status=JobStatus.DONE).values_list("jid", flat=True))
    assert done == set(fast) | began_slow  # ... and reported
    assert Job.objects.filter(jid__in=slow, status=JobStatus.INIT).count() == len(slow) - len(
        began_slow
    )
    assert "SIGTERM received" in err
    assert re.search(r"stopping: \d running job\(s\) finish first", err), err
    claimed = len(fast) + len(began_slow)
    assert (
        f"jobqueue-worker: stopped: claimed={claimed} completed={claimed} failed=0 "
        "cancelled=0 lost=0 unreported=0"
    ) in err
    row = WorkerRow.objects.get(name="py-bare-venv")
    assert (row.kind, row.languages, row.version) == ("gateway", ["python"], version)
    assert row.stopped_at is not None
