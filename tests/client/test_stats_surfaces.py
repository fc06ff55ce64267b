"""A queue served only by a gateway worker shows the same counts everywhere
(docs/metrics.md): the console's overview and charts, ``jobqueue status --json`` and
the Prometheus endpoint (parsed with prometheus_client), for the TypeScript client's
``worker-cli`` and the Python client's ``Worker``.

Each run: 45 jobs done, 5 that fail twice (one retried attempt, then a dead letter),
so 45 done, 10 failed attempts and 5 dead letters. Then the jobs themselves are
deleted: the queue stays on the overview and in ``jobqueue status`` through its
statistics, with the same counts.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client as DjangoClient
from django.urls import reverse
from prometheus_client.parser import text_string_to_metric_families

from django_jobqueue.client import Client, Worker
from django_jobqueue.models import Job, JobStatus, JobTotal
from tests.workers_helpers import ROOT

from .live import live_gateway

pytestmark = pytest.mark.django_db(transaction=True)

DONE, FAILING = 45, 5
TS_WORKER = ROOT / "clients" / "typescript" / "dist" / "worker-cli.js"
TIMEOUT_S = 180
#: The Node worker's handlers: a payload with "fail" throws (a retryable failure).
NODE_HANDLERS = """export default {
  %(type)s: (payload) => {
    if (payload.fail) { throw new Error("asked to fail"); }
    return payload;
  },
};
"""


def server_jobqueue(queue: str, job_type: str) -> dict[str, Any]:
    """The gateway's JOBQUEUE: the job type on its queue with one retry, a short backoff."""
    return {
        "LEASE_MS": 30_000,
        "HEARTBEAT_MS": 500,
        "BACKOFF_BASE_MS": 50,
        "GATEWAY": {
            "CLAIM_POLL_MS": 100,
            "JOB_TYPES": {job_type: {"queue": queue, "max_retry": 1}},
        },
    }


def wait_until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.25)


def enqueue(jq: Client, queue: str, job_type: str) -> None:
    jobs = [{"job_type": job_type, "queue": queue, "payload": {"n": n}} for n in range(DONE)]
    jobs += [
        {"job_type": job_type, "queue": queue, "payload": {"fail": True}} for _ in range(FAILING)
    ]
    assert len(jq.enqueue_batch(jobs)) == DONE + FAILING


def all_finished(queue: str) -> bool:
    states = list(Job.objects.filter(queue=queue).values_list("status", flat=True))
    return states.count(JobStatus.DONE) == DONE and states.count(JobStatus.MAX_RETRY) == FAILING


def stats_written(queue: str) -> bool:
    """The gateway process's counts reached the database (its flush timer, ~2 s)."""
    totals = list(JobTotal.objects.filter(queue=queue).values_list("done", "retried", "failed"))
    return totals == [(DONE, FAILING, FAILING)]


def run_typescript(url: str, token: str, queue: str, job_type: str, tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "the TypeScript worker needs node on PATH"
    assert TS_WORKER.exists(), (
        f"build the TypeScript client first (cd clients/typescript && npm ci && npm run "
        f"build; scripts/test does it): {TS_WORKER} is missing"
    )
    handlers = tmp_path / "handlers.mjs"
    handlers.write_text(NODE_HANDLERS % {"type": json.dumps(job_type)})
    command = [node, str(TS_WORKER), "--url", url, "--token", token, "--queues", queue,
               "--concurrency", "4", "--handlers", str(handlers)]  # fmt: skip
    process = subprocess.Popen(command, cwd=ROOT)  # noqa: S603 (our node, our script)
    try:
        wait_until(lambda: process.poll() is None and all_finished(queue), "the Node worker")
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)
    assert process.returncode == 0


def run_python(url: str, token: str, queue: str, job_type: str, tmp_path: Path) -> None:
    def handler(payload: dict[str, Any], ctx: Any) -> dict[str, Any]:
        if payload.get("fail"):
            raise RuntimeError("asked to fail")
        return payload

    with Client(url, token) as jq:
        worker = Worker(
            {job_type: handler}, client=jq, queues=[queue], concurrency=4, wait_ms=500,
            install_signals=False, name="stats-python",
        )  # fmt: skip
        thread = threading.Thread(target=worker.run)
        thread.start()
        try:
            wait_until(lambda: all_finished(queue), "the Python worker")
        finally:
            worker.stop()
            thread.join(60)


def overview_row(staff: DjangoClient, queue: str) -> tuple[Any, str]:
    response = staff.get(reverse("django_jobqueue_console:overview"))
    assert response.status_code == 200
    rows = [row for row in response.context["queues"] if row.queue == queue]
    assert len(rows) == 1, f"{queue} is not on the overview"
    return rows[0], response.content.decode()


def status_entry(queue: str) -> dict[str, Any]:
    out = StringIO()
    call_command("jobqueue", "status", "--json", stdout=out)
    entries = [e for e in json.loads(out.getvalue())["queues"] if e["queue"] == queue]
    assert len(entries) == 1, f"{queue} is not in jobqueue status"
    return entries[0]


def prometheus(staff: DjangoClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body = staff.get("/metrics/").content.decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }


@pytest.mark.parametrize("worker", ["typescript", "python"])
def test_a_queue_served_only_by_a_gateway_worker__same_counts_on_every_surface(
    worker: str, make_token: Callable[..., str], tmp_path: Path
) -> None:
    queue, job_type = f"stats-{worker}", f"stats.{worker}"
    run = run_typescript if worker == "typescript" else run_python
    with live_gateway(server_jobqueue(queue, job_type)) as url, Client(url, make_token()) as jq:
        enqueue(jq, queue, job_type)
        run(url, make_token(), queue, job_type, tmp_path)
        wait_until(lambda: stats_written(queue), "the gateway's statistics")

    staff = DjangoClient()
    staff.force_login(User.objects.create_user("ops", is_staff=True, is_superuser=True))
    row, page = overview_row(staff, queue)
    assert (row.done_last_hour, row.failed_attempts_last_hour, row.dead_letters_last_hour) == (
        DONE,
        2 * FAILING,
        FAILING,
    )
    assert row.dead == FAILING
    # Only this queue has statistics: the charts' legends count the same attempts.
    assert f"done ({DONE})" in page and f"retried ({FAILING})" in page
    assert f"dead letters ({FAILING})" in page

    entry = status_entry(queue)
    expected = {"done": DONE, "failed_attempts": 2 * FAILING, "dead_letters": FAILING}
    assert entry["last_hour"] == expected
    assert entry["totals"] == {**expected, "deduplicated": 0}
    assert entry["counts"][JobStatus.DONE] == DONE

    got = prometheus(staff)
    labels = (("job_type", job_type), ("queue", queue))
    for outcome, number in (("done", DONE), ("retried", FAILING), ("failed", FAILING)):
        key = ("jobqueue_job_outcomes_total", (labels[0], ("outcome", outcome), labels[1]))
        assert got[key] == number, outcome
    attempts = DONE + 2 * FAILING
    assert got[("jobqueue_job_duration_seconds_count", labels)] == attempts
    assert got[("jobqueue_job_pickup_seconds_count", labels)] == attempts  # a claim each
    assert got[("jobqueue_jobs", (("queue", queue), ("state", "dead")))] == FAILING

    # With no job left, the queue stays on the overview and in status by its statistics.
    Job.objects.filter(queue=queue).delete()
    row, _page = overview_row(staff, queue)
    assert (row.done_last_hour, row.failed_attempts_last_hour, row.dead) == (
        DONE,
        2 * FAILING,
        0,
    )
    assert status_entry(queue)["last_hour"] == expected
    key = ("jobqueue_job_outcomes_total", (labels[0], ("outcome", "done"), labels[1]))
    assert prometheus(staff)[key] == DONE
