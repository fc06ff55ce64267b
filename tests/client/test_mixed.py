"""Gateway workers and runworkers together: a Python client worker (and the
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

from django_jobqueue import storage
from django_jobqueue.models import Job, JobStatus
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
        assert storage.reap_expired(connection.alias) == 1
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
