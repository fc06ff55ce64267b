"""Soak: mixed enqueue and drain under faults, on the fault PostgreSQL.

Run with ``make soak`` (not part of ``make test``), about 10 minutes::

    SOAK_SECONDS=120 make soak           # a shorter run
    .venv/bin/python bench/soak.py --seconds 120 --processes 3

Needs scripts/start-fault-servers' PostgreSQL on 127.0.0.1:5433 (``make soak``
starts it): the soak restarts that server, so it never runs on the suite's 5432.
It makes a fresh database ``jq_soak`` there, starts ``runworkers --processes N``
and for ``--seconds``:

- enqueues ``--rate`` jobs a second from this process, in batches of a tenth of a
  second, each batch one transaction: ``worker.record`` (no work) and
  ``worker.sleep`` (0 to 200 ms) mixed; a batch whose commit fails is counted as
  refused, not as enqueued;
- SIGKILLs a random foreman process every ``--sigkill-every`` seconds (the
  supervisor starts a new one);
- terminates a random session of the database (``pg_terminate_backend``) every
  ``--conn-kill-every`` seconds;
- restarts the server once, half-way (``scripts/start-fault-servers restart
  postgres``).

Then it stops the faults, waits until every enqueued job is done (up to
``--drain-timeout`` seconds), stops the workers (SIGTERM) and prints: jobs done,
lost (an enqueued job not done: must be 0), run twice (jobs with more than one run
in the testapp's RunRecord, one row per handler start: after a SIGKILL mid-job or
an outcome write lost to a killed session, the job runs again once its lease
expires), and the p50/p99/max pickup latency (first run start minus enqueue
commit, ms). Exits 1 when any job was lost, 2 when the set-up failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PORT = int(os.environ.get("JOBQUEUE_FAULTS_PG_PORT", "5433"))
DATABASE = "jq_soak"
URL = f"postgres://postgres@127.0.0.1:{PORT}/{DATABASE}"


def percentile(values: list[float], q: float) -> float:
    """Return the ``q`` quantile (0..1) of ``values``, nearest rank (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def admin(sql: str, params: tuple[Any, ...] = (), database: str = "postgres") -> list[Any]:
    """Run one statement on a fresh autocommit session of the fault server."""
    import psycopg

    with psycopg.connect(
        host="127.0.0.1",
        port=PORT,
        user="postgres",
        dbname=database,
        autocommit=True,
        connect_timeout=5,
    ) as conn:
        cursor = conn.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []


def env() -> dict[str, str]:
    """The environment of a Django process on the soak database (tests.settings)."""
    return {
        **os.environ,
        "DATABASE_URL": URL,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "JOBQUEUE_TEST_JOBQUEUE": "{}",
        "JOBQUEUE_TEST_PGBOUNCER": "",
        "PYTHONUNBUFFERED": "1",
    }


def foremen(parent: int) -> list[int]:
    """The foreman processes of the supervisor ``parent`` (its children running runworkers)."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        command = Path(f"/proc/{parent}/cmdline").read_bytes()
    except OSError:
        return []
    found = []
    for pid in children:
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes() == command:
                found.append(int(pid))
        except OSError:
            continue
    return found


class Chaos:
    """The fault thread: SIGKILLs, session kills and one restart, counted."""

    def __init__(self, args: argparse.Namespace, parent: int, started: float) -> None:
        self.args = args
        self.parent = parent
        self.restart_at = started + args.seconds / 2
        self.stop = threading.Event()
        self.sigkills = 0
        self.conn_kills = 0
        self.restart_s: float | None = None
        self.thread = threading.Thread(target=self._run, name="soak-chaos", daemon=True)

    def _run(self) -> None:
        rng = random.Random(self.args.seed)  # noqa: S311 (not cryptography)
        now = time.monotonic()
        next_sigkill = now + rng.uniform(0.5, 1.5) * self.args.sigkill_every
        next_conn_kill = now + self.args.conn_kill_every
        while not self.stop.wait(0.1):
            now = time.monotonic()
            if self.restart_s is None and now >= self.restart_at:
                began = time.monotonic()
                done = subprocess.run(  # noqa: S603
                    [str(ROOT / "scripts" / "start-fault-servers"), "restart", "postgres"],
                    check=False,
                    timeout=120,
                    capture_output=True,
                    text=True,
                )
                self.restart_s = time.monotonic() - began
                if done.returncode:
                    print(f"soak: the restart failed: {done.stderr}", file=sys.stderr)  # noqa: T201
                print(f"soak: restarted the server in {self.restart_s:.1f} s", flush=True)  # noqa: T201
            if now >= next_sigkill:
                next_sigkill = now + rng.uniform(0.5, 1.5) * self.args.sigkill_every
                pids = foremen(self.parent)
                if pids:
                    try:
                        os.kill(rng.choice(pids), signal.SIGKILL)
                        self.sigkills += 1
                    except ProcessLookupError:
                        pass
            if now >= next_conn_kill:
                next_conn_kill = now + self.args.conn_kill_every
                try:
                    pids = [
                        pid
                        for (pid,) in admin(
                            "SELECT pid FROM pg_stat_activity WHERE datname = %s "
                            "AND pid <> pg_backend_pid()",
                            (DATABASE,),
                        )
                    ]
                    if pids:
                        admin("SELECT pg_terminate_backend(%s)", (rng.choice(pids),))
                        self.conn_kills += 1
                except Exception:  # noqa: BLE001 (the server is restarting)
                    pass


def enqueue_batch(rng: random.Random, count: int) -> list[str]:
    """Enqueue ``count`` mixed jobs in one transaction; return their jids."""
    from django.db import transaction

    from django_jobqueue import enqueue_job

    jids = []
    with transaction.atomic():
        for i in range(count):
            if rng.random() < 0.5:
                result = enqueue_job(None, "worker.record", {"label": str(i)})
            else:
                payload = {"s": round(rng.uniform(0, 0.2), 3), "label": str(i)}
                result = enqueue_job(None, "worker.sleep", payload)
            jids.append(result["jid"])
    return jids


def report(jids: list[str]) -> dict[str, Any]:
    """Count done, lost and run-twice jobs and the pickup latencies of ``jids``."""
    from django.db.models import Count, Min

    from django_jobqueue.models import Job
    from tests.testapp.models import RunRecord

    status = dict(Job.objects.values_list("jid", "status"))
    created = dict(Job.objects.values_list("jid", "created_at"))
    runs = {
        row["jid"]: (row["n"], row["first"])
        for row in RunRecord.objects.values("jid").annotate(n=Count("id"), first=Min("created_at"))
    }
    done = sum(1 for jid in jids if status.get(jid) == "done")
    pickups = [
        (runs[jid][1] - created[jid]).total_seconds() * 1000
        for jid in jids
        if jid in runs and jid in created
    ]
    return {
        "enqueued": len(jids),
        "done": done,
        "lost": len(jids) - done,
        "not_done": _not_done(status.get(jid, "missing") for jid in jids),
        "run_twice": sum(1 for jid in jids if jid in runs and runs[jid][0] > 1),
        "runs": sum(n for n, _first in runs.values()),
        "pickup_p50_ms": round(percentile(pickups, 0.50), 1),
        "pickup_p99_ms": round(percentile(pickups, 0.99), 1),
        "pickup_max_ms": round(max(pickups, default=0.0), 1),
    }


def _not_done(values: Any) -> dict[str, int]:
    """Count the statuses in ``values`` other than done."""
    counts: dict[str, int] = {}
    for value in values:
        if value != "done":
            counts[value] = counts.get(value, 0) + 1
    return counts


def main() -> int:
    """Run the soak; print its figures and one JSON line; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS") or 600)
    )
    parser.add_argument("--rate", type=float, default=40.0, help="jobs enqueued per second")
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--lease", type=int, default=5000, help="lease, ms")
    parser.add_argument("--sigkill-every", type=float, default=20.0, help="seconds, about")
    parser.add_argument("--conn-kill-every", type=float, default=3.0, help="seconds")
    parser.add_argument("--drain-timeout", type=float, default=180.0, help="seconds")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--log", default="/tmp/jq-soak-workers.log")  # noqa: S108
    args = parser.parse_args()

    try:
        admin(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
        admin(f"CREATE DATABASE {DATABASE}")
    except Exception as exc:  # noqa: BLE001
        print(f"soak: the fault PostgreSQL on {PORT} does not answer: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    os.environ.update(env())
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", verbosity=0)

    log = Path(args.log).open("w")  # noqa: SIM115 (open for the workers' lifetime)
    workers = subprocess.Popen(  # noqa: S603
        [
            sys.executable,
            "-m",
            "django",
            "runworkers",
            "--processes",
            str(args.processes),
            "--concurrency",
            str(args.concurrency),
            "--lease",
            str(args.lease),
        ],
        cwd=ROOT,
        env=env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    rng = random.Random(args.seed)  # noqa: S311 (not cryptography)
    jids: list[str] = []
    refused = 0
    started = time.monotonic()
    chaos = Chaos(args, workers.pid, started)
    chaos.thread.start()
    per_batch = max(1, round(args.rate / 10))
    print(  # noqa: T201
        f"soak: {args.seconds:.0f} s, {args.rate:.0f} jobs/s, {args.processes} processes x "
        f"{args.concurrency} threads, lease {args.lease} ms; worker log {args.log}",
        flush=True,
    )
    try:
        next_batch = started
        while time.monotonic() - started < args.seconds:
            try:
                jids.extend(enqueue_batch(rng, per_batch))
            except Exception:  # noqa: BLE001 (a killed session or the restart)
                refused += per_batch
                connection.close()
            next_batch += 0.1
            time.sleep(max(0.0, next_batch - time.monotonic()))
        chaos.stop.set()
        chaos.thread.join()
        print(f"soak: faults stopped; draining {len(jids)} jobs", flush=True)  # noqa: T201
        wanted = set(jids)
        deadline = time.monotonic() + args.drain_timeout
        while time.monotonic() < deadline:
            from django_jobqueue.models import Job

            try:
                done = Job.objects.filter(status="done").values_list("jid", flat=True)
                if wanted <= set(done):
                    break
            except Exception:  # noqa: BLE001 (a session killed at the very end)
                connection.close()
            time.sleep(1)
    finally:
        chaos.stop.set()
        workers.send_signal(signal.SIGTERM)
        try:
            workers.wait(timeout=60)
        except subprocess.TimeoutExpired:
            workers.kill()
            workers.wait()
        log.close()

    figures = report(jids)
    figures.update(
        refused=refused,
        sigkills=chaos.sigkills,
        conn_kills=chaos.conn_kills,
        restart_s=round(chaos.restart_s or 0.0, 1),
        seconds=args.seconds,
    )
    print(  # noqa: T201
        f"soak: {figures['seconds']:.0f} s; faults: {figures['sigkills']} SIGKILLs, "
        f"{figures['conn_kills']} session kills, 1 restart ({figures['restart_s']} s)\n"
        f"  jobs enqueued  {figures['enqueued']} ({refused} refused while the server was down)\n"
        f"  jobs done      {figures['done']}\n"
        f"  lost           {figures['lost']} {figures['not_done'] or ''}\n"
        f"  run twice      {figures['run_twice']} ({figures['runs']} runs)\n"
        f"  pickup p50/p99/max  {figures['pickup_p50_ms']} / {figures['pickup_p99_ms']} / "
        f"{figures['pickup_max_ms']} ms"
    )
    print(json.dumps(figures))  # noqa: T201
    return 1 if figures["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
