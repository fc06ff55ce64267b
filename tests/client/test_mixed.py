"""Gateway workers and runworkers together. First (every leg): a Python client worker (and the
TypeScript client's Node worker, when clients/typescript/ exists) run 500 jobs through
the gateway while a ``runworkers`` process runs 500 others; each job runs once, counted
in the side table (RunRecord), and a report under a lost lease answers 409.

The Node worker is launched as ``node clients/typescript/dist/worker-cli.js --handlers
FILE`` (clients/typescript/README.md); its handler appends each jid it runs to a file,
which this test copies into the side table. When clients/typescript/package.json exists the
Node worker is required: a missing ``node`` or an unbuilt dist/ fails the test.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection
from jobqueue_client import Client, LeaseLost, Worker

from django_jobqueue import reaping
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.models import Worker as WorkerRow
from tests.testapp.models import RunRecord
from tests.workers_helpers import ROOT, run_workers

from .live import live_gateway

pytestmark = pytest.mark.django_db(transaction=True)

#: Jobs for the gateway workers, and for runworkers.
GATEWAY_JOBS = RUNWORKERS_JOBS = 500
EXT_QUEUE, EXT_TYPE = "mix-ext", "mix.ext"
#: A 30 s lease: the test counts each job run once, and a short lease can expire in a
#: loaded machine's stall; the lost-lease step takes its own 1 s lease.
SERVER_JOBQUEUE = {
    "LEASE_MS": 30_000,
    "HEARTBEAT_MS": 500,
    "GATEWAY": {
        "CLAIM_POLL_MS": 100,
        "JOB_TYPES": {EXT_TYPE: {"queue": EXT_QUEUE, "max_retry": 3}},
    },
}
TS_DIR = ROOT / "clients" / "typescript"
TS_WORKER = TS_DIR / "dist" / "worker-cli.js"
TIMEOUT_S = 240


#: The Node worker's handler: record the jid, return the payload.
NODE_HANDLERS = """import { appendFileSync } from "node:fs";
export default {
  %(type)s: (payload, ctx) => { appendFileSync(%(record)s, ctx.jid + "\\n"); return payload; },
};
"""


def node_worker_command(url: str, token: str, record: Path) -> list[str] | None:
    """The Node worker's command line, or None when there is no TypeScript client.

    Its handler module (written beside ``record``) appends each jid it runs to
    ``record``; scripts/test builds clients/typescript before the legs start.

    Raises
    ------
    AssertionError
        If clients/typescript/ exists but node or its built worker does not.
    """
    if not (TS_DIR / "package.json").exists():
        return None
    node = shutil.which("node")
    assert node, "clients/typescript/ exists: the mixed test needs node on PATH"
    assert TS_WORKER.exists(), (
        f"build the TypeScript client first (cd clients/typescript && npm ci && npm run "
        f"build; scripts/test does it): {TS_WORKER} is missing"
    )
    handlers = record.with_name("node-handlers.mjs")
    handlers.write_text(
        NODE_HANDLERS % {"type": json.dumps(EXT_TYPE), "record": json.dumps(str(record))}
    )
    return [
        node,
        str(TS_WORKER),
        "--url", url,
        "--token", token,
        "--queues", EXT_QUEUE,
        "--concurrency", "4",
        "--handlers", str(handlers),
    ]  # fmt: skip


def test_mixed__gateway_workers_and_runworkers_run_each_job_once(make_token, tmp_path):
    token = make_token()
    with live_gateway(SERVER_JOBQUEUE) as url, Client(url, token) as jq:
        ext = [
            r.jid
            for r in jq.enqueue_batch(
                [{"job_type": EXT_TYPE, "payload": {"n": n}, "queue": EXT_QUEUE}
                 for n in range(GATEWAY_JOBS)]
            )
        ]  # fmt: skip
        py = [
            r.jid
            for r in jq.enqueue_batch(
                [{"job_type": "mix.py", "payload": {"n": n}} for n in range(RUNWORKERS_JOBS)]
            )
        ]
        assert Job.objects.filter(queue="mix-py").count() == RUNWORKERS_JOBS

        # A lost lease: claim one job for a second, let it expire, reap it; the report
        # under the old token is refused and the job goes back to be run once more.
        (stale,) = jq.claim([EXT_QUEUE], job_types=[EXT_TYPE], lease_ms=1_000)
        time.sleep(1.3)
        assert reaping.reap_expired(connection.alias) == 1
        with pytest.raises(LeaseLost) as lost:
            jq.complete(stale.jid, stale.lease_token, {"stale": True})
        assert lost.value.status == 409
        assert Job.objects.get(jid=stale.jid).status == JobStatus.RETRY

        def run_ext(payload, ctx):
            RunRecord.objects.create(
                jid=ctx.jid, label="python-client", attempt=ctx.attempt, worker=ctx.worker
            )
            connection.close()
            return payload

        record = tmp_path / "node-runs.txt"
        record.touch()
        node_command = node_worker_command(url, make_token(), record)
        node = (
            subprocess.Popen(node_command, cwd=ROOT)  # noqa: S603
            if node_command
            else None
        )
        runworkers = run_workers(
            "--queues",
            "mix-py",
            "--concurrency",
            "4",
            "--min-sleep",
            "5",
            "--max-sleep",
            "50",
            "--ramp-time",
            "0",
            wait=False,
            capture=False,
        )  # fmt: skip (its log goes to pytest's capture: a pipe nobody reads fills up)
        python = Worker(
            {EXT_TYPE: run_ext}, client=jq, queues=[EXT_QUEUE], concurrency=4,
            wait_ms=500, install_signals=False, name="mixed-python",
        )  # fmt: skip
        stats: dict[str, int] = {}
        thread = threading.Thread(target=lambda: stats.update(python.run()))
        thread.start()
        try:
            deadline = time.monotonic() + TIMEOUT_S
            total = GATEWAY_JOBS + RUNWORKERS_JOBS
            while Job.objects.filter(status=JobStatus.DONE).count() < total:
                assert runworkers.poll() is None, "runworkers exited"
                assert node is None or node.poll() is None, "the Node worker exited"
                assert time.monotonic() < deadline, Counter(
                    Job.objects.values_list("queue", "status")
                )
                time.sleep(0.5)
        finally:
            python.stop()
            thread.join(60)
            runworkers.send_signal(signal.SIGTERM)
            runworkers.wait(timeout=60)
            if node is not None:
                node.send_signal(signal.SIGTERM)
                node.wait(timeout=60)

    assert runworkers.returncode == 0
    assert node is None or node.returncode == 0
    node_runs = record.read_text().split()
    RunRecord.objects.bulk_create(
        [RunRecord(jid=jid, label="node", worker="node") for jid in node_runs]
    )
    runs = Counter(RunRecord.objects.values_list("jid", flat=True))
    assert set(runs) == set(ext) | set(py)
    assert max(runs.values()) == 1, [jid for jid, n in runs.items() if n > 1]
    by_label = Counter(RunRecord.objects.values_list("label", flat=True))
    assert by_label["runworkers"] == RUNWORKERS_JOBS
    assert by_label["python-client"] + by_label["node"] == GATEWAY_JOBS
    assert by_label["python-client"] == stats["completed"] > 0
    if node is not None:
        assert by_label["node"] > 0
    assert stats["lost"] == 0
    assert set(RunRecord.objects.filter(label="runworkers").values_list("jid", flat=True)) == set(
        py
    )


#: The every-language drain (scripts/test's clients leg only): jobs for the languages'
#: ``conformance worker`` processes, and for runworkers.
EVERY_LANGUAGE_JOBS = RUNWORKERS_EVERY_JOBS = 1_000
EVERY_QUEUE = "mix-every"
EVERY_TIMEOUT_S = 420


@pytest.mark.clients
@pytest.mark.skipif(
    not os.environ.get("JOBQUEUE_TEST_CLIENTS"),
    reason="every client is built in scripts/test's clients leg only",
)
def test_mixed__every_language_and_runworkers_drain_2000_jobs_each_once(tmp_path):
    """Workers of every language with a ``clients/<lang>/conformance`` (its ``worker``
    command: the client's own Worker, clients/conformance/README.md) and ``runworkers``
    drain 2,000 jobs together; each runs once: done at its first attempt (a second claim
    would count a second attempt), runworkers' runs counted in the side table."""
    from . import conformance as cf

    languages = cf.languages()
    assert len(languages) >= 6, languages
    for lang in languages:
        cf.build(lang)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(cf.issue_roles("mix-every")))
    with live_gateway(cf.GATEWAY_JOBQUEUE) as url:
        workers: dict[str, subprocess.Popen[bytes]] = {}
        logs = {lang: (tmp_path / f"{lang}.log").open("w") for lang in languages}
        env = cf.runner_env(
            url, tokens, {"JOBQUEUE_QUEUE": EVERY_QUEUE, "JOBQUEUE_CONCURRENCY": "4"}
        )
        runworkers = None
        try:
            for lang in languages:
                workers[lang] = subprocess.Popen(  # noqa: S603
                    [str(cf.CLIENTS / lang / "conformance"), "worker"],
                    cwd=ROOT, env=env, stdout=logs[lang], stderr=subprocess.STDOUT,
                )  # fmt: skip
            # Every worker registered before the first job, so each gets its share.
            deadline = time.monotonic() + 120
            while True:
                registered = {
                    w.name for w in WorkerRow.objects.all() if EVERY_QUEUE in (w.queues or [])
                }
                if len(registered) >= len(languages):
                    break
                for lang, process in workers.items():
                    assert process.poll() is None, f"{lang} worker exited: {_log(tmp_path, lang)}"
                assert time.monotonic() < deadline, f"registered only {sorted(registered)}"
                time.sleep(0.2)
            with Client(url, json.loads(tokens.read_text())["all"]) as jq:
                echo = {"job_type": "conformance.echo", "queue": EVERY_QUEUE}
                ext = _enqueue(
                    jq, [{**echo, "payload": {"n": n}} for n in range(EVERY_LANGUAGE_JOBS)]
                )
                py = _enqueue(
                    jq,
                    [
                        {"job_type": "mix.py", "payload": {"n": n}}
                        for n in range(RUNWORKERS_EVERY_JOBS)
                    ],
                )
            runworkers = run_workers(
                "--queues", "mix-py", "--concurrency", "4", "--min-sleep", "5",
                "--max-sleep", "50", "--ramp-time", "0", wait=False, capture=False,
            )  # fmt: skip
            deadline = time.monotonic() + EVERY_TIMEOUT_S
            total = EVERY_LANGUAGE_JOBS + RUNWORKERS_EVERY_JOBS
            while Job.objects.filter(jid__in=ext + py, status=JobStatus.DONE).count() < total:
                assert runworkers.poll() is None, "runworkers exited"
                for lang, process in workers.items():
                    assert process.poll() is None, f"{lang} worker exited: {_log(tmp_path, lang)}"
                assert time.monotonic() < deadline, Counter(
                    Job.objects.filter(jid__in=ext + py).values_list("queue", "status")
                )
                time.sleep(0.5)
        finally:
            for process in workers.values():
                process.send_signal(signal.SIGTERM)
            if runworkers is not None:
                runworkers.send_signal(signal.SIGTERM)
            for process in [*workers.values(), *([runworkers] if runworkers else [])]:
                try:
                    process.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            for log in logs.values():
                log.close()

    for lang, process in workers.items():
        assert process.returncode == 0, f"{lang} worker exit status {process.returncode}"
    assert runworkers is not None and runworkers.returncode == 0
    jobs = Job.objects.filter(jid__in=ext)
    assert Counter(jobs.values_list("status", "attempt")) == {
        (JobStatus.DONE, 1): EVERY_LANGUAGE_JOBS
    }
    by_lang = Counter(job.result["lang"] for job in jobs)
    for job in jobs:
        assert job.result["payload"] == job.payload, job.jid
    assert set(by_lang) == set(languages), by_lang
    runs = Counter(RunRecord.objects.filter(jid__in=py).values_list("jid", flat=True))
    assert set(runs) == set(py)
    assert max(runs.values()) == 1, [jid for jid, n in runs.items() if n > 1]
    print(f"every-language drain: {dict(by_lang)}")


def _enqueue(jq: Client, specs: list[dict[str, object]]) -> list[str]:
    """Enqueue ``specs`` in batches of 500; return their jids in order."""
    return [
        r.jid
        for start in range(0, len(specs), 500)
        for r in jq.enqueue_batch(specs[start : start + 500])
    ]


def _log(tmp_path: Path, lang: str) -> str:
    return (tmp_path / f"{lang}.log").read_text(errors="replace")[-3000:]
