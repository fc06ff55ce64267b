"""Each gateway client's worker side by side, in one run: ``bench/gateway.py --clients``.

For every language with a ``clients/<lang>/conformance`` runner (built first), on an
emptied job table: start its ``conformance worker`` (the client's own Worker,
clients/conformance/README.md) at concurrency 4 on one queue, wait until it registered,
enqueue ``--jobs`` no-op ``conformance.echo`` jobs (one batch request per 1,000), and
time until every one is done: the drain through the gateway (gunicorn, as
bench/gateway.py serves it). It prints each language's jobs/s and its ratio to the
Python client's worker. Not a test: numbers vary with the machine; the ratios are the
result.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ROOT / "clients"
QUEUE = "bench-clients"


def languages() -> list[str]:
    """Every language with an executable runner, Python first (the ratios' baseline)."""
    found = sorted(
        p.parent.name
        for p in CLIENTS.glob("*/conformance")
        if p.is_file() and os.access(p, os.X_OK)
    )
    return sorted(found, key=lambda lang: (lang != "python", lang))


def build(lang: str) -> bool:
    """Build one client; print why not and return False when it does not build."""
    result = subprocess.run(
        [str(CLIENTS / lang / "conformance"), "build"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        print(f"{lang}: did not build, left out:\n{(result.stdout + result.stderr)[-2000:]}")
    return result.returncode == 0


def drain(lang: str, url: str, tokens: Path, jobs: int, max_seconds: float) -> tuple[int, float]:
    """Run ``lang``'s worker over ``jobs`` echo jobs; return (jobs done, seconds)."""
    from bench.gateway import empty_jobs
    from django_jobqueue.client import Client
    from django_jobqueue.models import Job, JobStatus
    from django_jobqueue.models import Worker as WorkerRow

    empty_jobs()
    env = {
        **os.environ,
        "JOBQUEUE_URL": url,
        "JOBQUEUE_TOKENS": str(tokens),
        "JOBQUEUE_QUEUE": QUEUE,
        "JOBQUEUE_CONCURRENCY": "4",
    }
    started = time.time()
    worker = subprocess.Popen(  # noqa: S603
        [str(CLIENTS / lang / "conformance"), "worker"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not WorkerRow.objects.filter(
            last_seen_at__gte=_aware(started), stopped_at__isnull=True, queues__contains=[QUEUE]
        ).exists():
            if worker.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{lang}: the worker did not register")
            time.sleep(0.1)
        token = json.loads(tokens.read_text())["all"]
        start = time.perf_counter()
        with Client(url, token) as jq:
            for first in range(0, jobs, 1_000):
                count = min(1_000, jobs - first)
                jq.enqueue_batch(
                    [{"job_type": "conformance.echo", "queue": QUEUE, "payload": {"n": first + n}}
                     for n in range(count)]
                )  # fmt: skip
        done = 0
        while done < jobs and time.perf_counter() - start < max_seconds:
            time.sleep(0.05)
            done = Job.objects.filter(queue=QUEUE, status=JobStatus.DONE).count()
        return done, time.perf_counter() - start
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _aware(timestamp: float) -> Any:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(timestamp - 5, tz=UTC)


def run(url: str, token_all: str, token_work: str, jobs: int, max_seconds: float) -> None:
    """Print the table of every client's drain (jobs/s, ratio to the Python worker)."""
    with tempfile.TemporaryDirectory(prefix="jq-bench-clients-") as tmp:
        tokens = Path(tmp) / "tokens.json"
        tokens.write_text(json.dumps({"all": token_all, "work": token_work}))
        rates: dict[str, float] = {}
        for lang in languages():
            if not build(lang):
                continue
            done, seconds = drain(lang, url, tokens, jobs, max_seconds)
            rates[lang] = done / seconds if seconds > 0 else float("inf")
            print(f"{lang:<11} worker, concurrency 4: {done:>6} jobs in {seconds:6.2f} s "
                  f"{rates[lang]:8.0f} jobs/s")  # fmt: skip
    base = rates.get("python")
    print()
    print("drain through the gateway, ratio to the Python client's worker:")
    for lang, value in rates.items():
        print(f"  {lang:<11} {value / base:5.2f}" if base else f"  {lang:<11} (no Python baseline)")
