"""The claim while the database cannot clean up: a held snapshot, readers, overload.

Run by hand (minutes; not part of ``make test``)::

    .venv/bin/python bench/horizon.py --db postgres              # about 13 minutes
    .venv/bin/python bench/horizon.py --db postgres --scale 0.1  # every phase a tenth
    .venv/bin/python bench/horizon.py --db mariadb --scale 0.2
    .venv/bin/python bench/horizon.py --db sqlite --scale 0.2

Every transition of a job leaves a dead row version (and dead index entries) that only
the database's clean-up reclaims: PostgreSQL's vacuum, InnoDB's purge, SQLite's WAL
checkpoint. A transaction holding an old snapshot stops that clean-up, and a claim
that walks the garbage slows down with it (docs/horizon.md). This benchmark starts a
real ``runworkers --concurrency 4`` on the scratch database (bench/common.py), first
measures the rate it drains at (bench/drain.py's burst drain, unless ``--rate`` is
given), waits until the worker has run one probe job, then offers half of that rate
from this process (``bench.stamp`` jobs in one ``enqueue_many`` transaction every
100 ms) through five phases:

=============  =====  =========================================================
phase          s      what else runs
=============  =====  =========================================================
clean           60    nothing
held_xmin      300    one session holds a snapshot open: PostgreSQL ``BEGIN;
                      SELECT txid_current();``, MariaDB ``START TRANSACTION WITH
                      CONSISTENT SNAPSHOT`` and one read, SQLite ``BEGIN`` and one
                      read (its WAL cannot be checkpointed past it)
recovery       120    nothing: the backlog of the phase before should drain
readers        120    4 sessions scan the job table in REPEATABLE READ
                      transactions, each pausing ``--reader-pause-ms`` (1 s)
                      between two scans: on 2 cores, scans back to back
                      would measure only the CPU they take
overload       120    1.5 x the measured drain rate is offered
=============  =====  =========================================================

``--scale`` multiplies every duration (0.1 for development); ``--phases clean,overload``
runs those phases only, in their order (no targets are printed then). ``--garbage N``
(PostgreSQL) writes N jobs as soon as the snapshot is held, waiting and then ended
in one transaction: each leaves a dead entry in the claim indexes that the held
snapshot keeps, as N jobs run under it would, without running them; with a low
``--rate`` it measures a trickle of jobs beside a long-held snapshot. Afterwards the producer
stops, the workers drain what is left (bounded) and stop. Per phase, from the rows
(each job's payload carries the time just before its enqueue, its handler returns the
time it started, both this host's clock): the offered rate (jobs enqueued per
second), the throughput (handler starts per second) and their ratio; the pickup
p50/p99 (handler start minus enqueue, ms) of the jobs enqueued in the phase, and of
its last fifth (``tail``); the backlog (jobs enqueued and not started) at its end
and its largest. Sampled while it runs: the job table's and its indexes' size and
its dead row versions at the end of the phase (PostgreSQL ``pg_relation_size``,
``pg_indexes_size``, ``pg_stat_user_tables.n_dead_tup``; MariaDB
``information_schema.TABLES`` and InnoDB's history list length; SQLite the
database and WAL file sizes), and what the workers' sessions were doing once a
second (PostgreSQL ``pg_stat_activity`` wait events; MariaDB the process list's
state). Prints the table, then one JSON line.

A PostgreSQL server with ``autovacuum = off`` (a CI configuration) would let the dead
row versions pile up in every phase; there a thread of this benchmark stands in for
autovacuum: every ``--naptime`` seconds, past autovacuum's threshold for the table,
it runs ``VACUUM (ANALYZE)`` with autovacuum's cost delay (``vacuums`` in the table
counts them, cumulatively). ``uptime``'s load averages are printed
at the start and the end: the machine may be shared, so read ratios within a run.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import NAME, ROOT, URLS, clear_jobs, env_for, setup
from pickup import percentile

#: (name, seconds at scale 1, offered rate as a share of the measured drain rate, extra)
PHASES = (
    ("clean", 60, 0.5, ""),
    ("held_xmin", 300, 0.5, "hold"),
    ("recovery", 120, 0.5, ""),
    ("readers", 120, 0.5, "readers"),
    ("overload", 120, 1.5, ""),
)
TICK_S = 0.1
READERS = 4


def load_average() -> str:
    """Return ``uptime``'s load averages (1, 5, 15 minutes) as one string."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- vendor pieces: a held snapshot, a reader's scan, the samples ------------------


class Vendor:
    """What differs per database: sessions of our own, the table's sizes, the waits."""

    def __init__(self, db: str, table: str) -> None:
        self.db = db
        self.table = table

    def connect(self) -> Any:
        """Return a new autocommit DB-API connection to the scratch database."""
        raise NotImplementedError

    def session_id(self, conn: Any) -> Any:
        """Return the server's id of ``conn``'s session (None where there is none)."""
        return None

    def hold(self, conn: Any) -> None:
        """Open a transaction on ``conn`` that holds a snapshot until it commits."""
        raise NotImplementedError

    def garbage(self, conn: Any, n: int) -> None:
        """Write ``n`` jobs waiting, then ended, in one transaction (``--garbage``)."""
        raise NotImplementedError(f"--garbage is for PostgreSQL, not {self.db}")

    def read_scan(self, conn: Any) -> None:
        """Run one REPEATABLE READ transaction that scans the whole job table."""
        raise NotImplementedError

    def stats(self, conn: Any) -> dict[str, Any]:
        """Return the job table's sizes (MB) and its garbage, now."""
        raise NotImplementedError

    def waits(self, conn: Any, ours: set[Any]) -> list[str]:
        """Return one word per worker session: what it is doing now."""
        return []


class Postgres(Vendor):
    def connect(self) -> Any:
        import psycopg

        return psycopg.connect(
            host="127.0.0.1", user="postgres", dbname=NAME, autocommit=True
        )  # fmt: skip

    def session_id(self, conn: Any) -> Any:
        return conn.execute("SELECT pg_backend_pid()").fetchone()[0]

    def hold(self, conn: Any) -> None:
        conn.execute("BEGIN")
        conn.execute("SELECT txid_current()")

    def garbage(self, conn: Any, n: int) -> None:
        """Write ``n`` jobs waiting, then ended, in one transaction (``--garbage``)."""
        columns = [
            row[0]
            for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s "
                "AND column_name <> 'id' ORDER BY ordinal_position",
                [self.table],
            ).fetchall()
        ]
        fixed = {
            "jid": "'garbage-' || g",
            "job_type": "'bench.garbage'",
            "payload": "'{}'::jsonb",
            "status": "'init'",
            "waiting": "TRUE",
            "run_at": "now() - interval '1 hour'",
        }
        picks = ", ".join(fixed.get(c, f"t.{c}") for c in columns)
        with conn.transaction():
            conn.execute(
                f"INSERT INTO {self.table} ({', '.join(columns)}) "  # noqa: S608
                f"SELECT {picks} FROM (SELECT * FROM {self.table} "
                "WHERE job_type = 'bench.stamp' LIMIT 1) t, generate_series(1, %s) g",
                [n],
            )
            conn.execute(
                f"UPDATE {self.table} SET waiting = FALSE, status = 'done', "  # noqa: S608
                "finished_at = now() WHERE job_type = 'bench.garbage' AND waiting"
            )

    def read_scan(self, conn: Any) -> None:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute(f"SELECT count(*), sum(attempt), max(length(status)) FROM {self.table}")  # noqa: S608
        conn.execute("COMMIT")

    def stats(self, conn: Any) -> dict[str, Any]:
        row = conn.execute(
            "SELECT pg_relation_size(c.oid), pg_indexes_size(c.oid), "
            "coalesce((SELECT pg_relation_size(i.oid) FROM pg_class i "
            "WHERE i.relname = 'jq_job_claim_any_idx'), 0), s.n_live_tup, "
            "s.n_dead_tup, s.autovacuum_count FROM pg_class c "
            "JOIN pg_stat_user_tables s ON s.relid = c.oid WHERE c.relname = %s",
            [self.table],
        ).fetchone()
        mb = 1024 * 1024
        return {
            "table_mb": row[0] / mb,
            "indexes_mb": row[1] / mb,
            "claim_index_mb": row[2] / mb,
            "live": row[3],
            "dead": row[4],
            "autovacuums": row[5],
        }

    def waits(self, conn: Any, ours: set[Any]) -> list[str]:
        rows = conn.execute(
            "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
            "WHERE datname = current_database() AND backend_type = 'client backend' "
            "AND pid <> ALL(%s)",
            [sorted(ours)],
        ).fetchall()
        words = []
        for state, kind, event in rows:
            if state == "active":
                words.append(f"{kind}:{event}" if kind else "CPU")
            else:
                words.append(str(state))
        return words


class MariaDB(Vendor):
    def connect(self) -> Any:
        import MySQLdb

        conn = MySQLdb.connect(host="127.0.0.1", user="root", database=NAME)
        conn.autocommit(True)  # noqa: FBT003 (the driver's own signature)
        return conn

    def _run(self, conn: Any, sql: str, params: Any = None) -> list[Any]:
        cursor = conn.cursor()
        cursor.execute(sql, params)
        rows = list(cursor.fetchall()) if cursor.description else []
        cursor.close()
        return rows

    def session_id(self, conn: Any) -> Any:
        return self._run(conn, "SELECT CONNECTION_ID()")[0][0]

    def hold(self, conn: Any) -> None:
        self._run(conn, "START TRANSACTION WITH CONSISTENT SNAPSHOT")
        self._run(conn, f"SELECT id FROM {self.table} LIMIT 1")  # noqa: S608

    def read_scan(self, conn: Any) -> None:
        self._run(conn, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        self._run(conn, "START TRANSACTION")
        self._run(conn, f"SELECT count(*), sum(attempt), max(length(status)) FROM {self.table}")  # noqa: S608
        self._run(conn, "COMMIT")

    def stats(self, conn: Any) -> dict[str, Any]:
        size = self._run(
            conn,
            "SELECT data_length, index_length, table_rows FROM information_schema.TABLES "
            "WHERE table_schema = DATABASE() AND table_name = %s",
            [self.table],
        )
        history = self._run(
            conn,
            "SELECT `count` FROM information_schema.INNODB_METRICS "
            "WHERE name = 'trx_rseg_history_len'",
        )
        mb = 1024 * 1024
        data, index, rows = size[0] if size else (0, 0, 0)
        return {
            "table_mb": data / mb,
            "indexes_mb": index / mb,
            "live": rows,
            "dead": history[0][0] if history else None,  # undo records not yet purged
        }

    def waits(self, conn: Any, ours: set[Any]) -> list[str]:
        rows = self._run(
            conn,
            "SELECT id, command, state FROM information_schema.PROCESSLIST WHERE db = DATABASE()",
        )
        words = []
        for ident, command, state in rows:
            if ident in ours:
                continue
            words.append(str(command) if command == "Sleep" else f"{command}:{state or '-'}")
        return words


class SQLite(Vendor):
    def __init__(self, db: str, table: str) -> None:
        super().__init__(db, table)
        self.path = URLS["sqlite"].removeprefix("sqlite:///")

    def connect(self) -> Any:
        import sqlite3

        return sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)

    def hold(self, conn: Any) -> None:
        conn.execute("BEGIN")
        conn.execute(f"SELECT id FROM {self.table} LIMIT 1").fetchall()  # noqa: S608

    def read_scan(self, conn: Any) -> None:
        # SQLite's transactions are serializable: one snapshot from the first read.
        conn.execute("BEGIN")
        conn.execute(
            f"SELECT count(*), sum(attempt), max(length(status)) FROM {self.table}"  # noqa: S608
        ).fetchall()
        conn.execute("COMMIT")

    def stats(self, conn: Any) -> dict[str, Any]:
        mb = 1024 * 1024
        wal = Path(self.path + "-wal")
        return {
            "table_mb": Path(self.path).stat().st_size / mb,
            "indexes_mb": None,
            "wal_mb": wal.stat().st_size / mb if wal.exists() else 0.0,
            "live": None,
            "dead": None,
        }


VENDORS = {"postgres": Postgres, "mariadb": MariaDB, "sqlite": SQLite}


class Autovacuum(threading.Thread):
    """Stands in for PostgreSQL's autovacuum on a server that runs with it off.

    Every ``naptime`` seconds it reads the job table's dead row versions and, past
    autovacuum's own threshold (``autovacuum_vacuum_threshold`` + ``..._scale_factor``
    x rows, the table's storage parameters first), runs ``VACUUM (ANALYZE)`` with
    autovacuum's cost delay and limit. Counted in the figures as ``vacuums``.
    """

    def __init__(self, vendor: Vendor, naptime: float) -> None:
        super().__init__(name="horizon-autovacuum", daemon=True)
        self.vendor = vendor
        self.naptime = naptime
        self.stop = threading.Event()
        self.vacuums = 0
        self.conn = vendor.connect()

    def run(self) -> None:
        conn = self.conn
        conn.execute("SET vacuum_cost_delay = '2ms'")
        conn.execute("SET vacuum_cost_limit = 200")
        while not self.stop.wait(self.naptime):
            row = conn.execute(
                "SELECT s.n_dead_tup, c.reltuples, c.reloptions, "
                "current_setting('autovacuum_vacuum_threshold')::float, "
                "current_setting('autovacuum_vacuum_scale_factor')::float "
                "FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid "
                "WHERE c.relname = %s",
                [self.vendor.table],
            ).fetchone()
            dead, rows, options, threshold, factor = row
            for option in options or ():
                name, _eq, value = option.partition("=")
                if name == "autovacuum_vacuum_threshold":
                    threshold = float(value)
                elif name == "autovacuum_vacuum_scale_factor":
                    factor = float(value)
            if dead > threshold + factor * max(rows, 0):
                conn.execute(f"VACUUM (ANALYZE) {self.vendor.table}")
                self.vacuums += 1

    def close(self) -> None:
        self.stop.set()
        self.join(600)
        self.conn.close()


# --- the run -----------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    seconds: float
    rate: float
    extra: str
    start: float = 0.0
    end: float = 0.0
    stats: dict[str, Any] = field(default_factory=dict)
    waits: Counter[str] = field(default_factory=Counter)
    samples: int = 0


class Producer(threading.Thread):
    """Enqueues ``bench.stamp`` jobs at the phase's rate, one transaction per tick."""

    def __init__(self) -> None:
        super().__init__(name="horizon-producer", daemon=True)
        self.rate = 0.0
        self.stop = threading.Event()
        self.enqueued = 0
        self.error: BaseException | None = None
        self.session: Any = None
        self.ready = threading.Event()

    def run(self) -> None:
        from django.db import connection, transaction

        from django_jobqueue import enqueue_many

        try:
            connection.ensure_connection()
            if connection.vendor == "postgresql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_backend_pid()")
                    self.session = cursor.fetchone()[0]
            elif connection.vendor == "mysql":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT CONNECTION_ID()")
                    self.session = cursor.fetchone()[0]
            self.ready.set()
            owed = 0.0
            last = time.monotonic()
            while not self.stop.is_set():
                now = time.monotonic()
                owed += self.rate * (now - last)
                last = now
                count = int(owed)
                if count:
                    owed -= count
                    stamp = time.time()
                    with transaction.atomic():
                        enqueue_many([{"job_type": "bench.stamp", "payload": {"t": stamp}}] * count)
                    self.enqueued += count
                self.stop.wait(max(0.0, TICK_S - (time.monotonic() - now)))
        except BaseException as exc:  # noqa: BLE001 (reported by the main thread)
            self.error = exc
            self.ready.set()
        finally:
            connection.close()


class Readers:
    """``READERS`` sessions, each scanning the job table in REPEATABLE READ, in a loop."""

    def __init__(self, vendor: Vendor, pause_s: float, ours: set[Any]) -> None:
        self.vendor = vendor
        self.pause_s = pause_s
        self.stop = threading.Event()
        self.scans = 0
        self.conns = [vendor.connect() for _ in range(READERS)]
        for conn in self.conns:
            ours.add(vendor.session_id(conn))
        self.threads = [
            threading.Thread(target=self._run, args=(conn,), daemon=True) for conn in self.conns
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, conn: Any) -> None:
        while not self.stop.is_set():
            self.vendor.read_scan(conn)
            self.scans += 1
            self.stop.wait(self.pause_s)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(120)
        for conn in self.conns:
            conn.close()


def sample(vendor: Vendor, conn: Any, phase: Phase, ours: set[Any], until: float) -> None:
    """Tally the workers' waits once a second until ``until`` (monotonic)."""
    while True:
        left = until - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(1.0, left))
        words = vendor.waits(conn, ours)
        phase.waits.update(words)
        phase.samples += 1


def measure_rate(db: str, jobs: int) -> float:
    """Return the steady drain rate (jobs/s) of ``runworkers --burst --concurrency 4``."""
    from drain import drain_once

    _elapsed, steady = drain_once(db, jobs, 1, 4)
    return steady


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the phases on ``args.db``; return the figures (see the module docstring)."""
    setup(args.db)
    from django.db import connection

    from django_jobqueue.models import Job

    table = Job._meta.db_table
    vendor = VENDORS[args.db](args.db, table)
    load_before = load_average()
    capacity = args.rate / 0.5 if args.rate else measure_rate(args.db, args.calibrate_jobs)
    clear_jobs()
    if args.db == "postgres":
        with connection.cursor() as cursor:
            cursor.execute(f"VACUUM ANALYZE {table}")  # noqa: S608
    connection.close()
    print(
        f"{args.db}: drain rate {capacity:.0f} jobs/s, offered {0.5 * capacity:.0f}/s, "
        f"load {load_before}",
        flush=True,
    )
    phases = [
        Phase(name, seconds * args.scale, share * capacity, extra)
        for name, seconds, share, extra in PHASES
        if not args.phases or name in args.phases.split(",")
    ]
    log = (Path(args.log) if args.log else Path(f"/tmp/{NAME}-horizon.log")).open("w")  # noqa: S108
    worker = subprocess.Popen(  # noqa: S603
        [sys.executable, "-m", "django", "runworkers", "--concurrency", "4"],
        cwd=ROOT,
        env=env_for(args.db),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    producer = Producer()
    side = vendor.connect()
    ours: set[Any] = {vendor.session_id(side)}
    autovacuum = None
    if args.db == "postgres" and side.execute("SHOW autovacuum").fetchone()[0] == "off":
        autovacuum = Autovacuum(vendor, args.naptime)
        ours.add(vendor.session_id(autovacuum.conn))
        autovacuum.start()
        print(f"  autovacuum is off here: VACUUM every {args.naptime:.0f} s past its threshold")
    try:
        wait_started(Job, worker)
        producer.start()
        producer.ready.wait(30)
        ours.add(producer.session)
        for phase in phases:
            producer.rate = phase.rate
            holder = readers = None
            if phase.extra == "hold":
                holder = vendor.connect()
                ours.add(vendor.session_id(holder))
                vendor.hold(holder)
                if args.garbage:
                    began = time.monotonic()
                    vendor.garbage(side, args.garbage)  # type: ignore[attr-defined]
                    print(
                        f"  {args.garbage} ended jobs written in {time.monotonic() - began:.1f} s"
                    )
            elif phase.extra == "readers":
                readers = Readers(vendor, args.reader_pause_ms / 1000, ours)
            phase.start = time.time()
            sample(vendor, side, phase, ours, time.monotonic() + phase.seconds)
            phase.end = time.time()
            phase.stats = vendor.stats(side)
            if autovacuum is not None:
                phase.stats["vacuums"] = autovacuum.vacuums
            if holder is not None:
                holder.commit() if args.db != "sqlite" else holder.execute("COMMIT")
                holder.close()
            if readers is not None:
                phase.stats["reader_scans"] = readers.scans
                readers.close()
            if producer.error is not None:
                raise RuntimeError(f"the producer failed: {producer.error!r}")
            if worker.poll() is not None:
                raise RuntimeError(f"runworkers exited {worker.returncode}: see {log.name}")
            print(
                f"  {phase.name}: {phase.seconds:.0f} s done, "
                f"{producer.enqueued} enqueued, load {load_average()}",
                flush=True,
            )
        producer.stop.set()
        producer.join(30)
        drained = wait_drained(Job, max(60.0, 2 * phases[-1].seconds))
    finally:
        producer.stop.set()
        if autovacuum is not None:
            autovacuum.close()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
        side.close()
        log.close()
    figures = summarise(Job, phases, capacity)
    return {
        "db": args.db,
        "scale": args.scale,
        "capacity_per_s": capacity,
        "offered_per_s": 0.5 * capacity,
        "drained_after": drained,
        "load_before": load_before,
        "load_after": load_average(),
        "phases": figures,
    }


def wait_started(job_model: Any, worker: subprocess.Popen[bytes]) -> None:
    """Wait until ``worker`` has run one probe job (a loaded machine starts it slowly).

    The probe's payload carries no enqueue time, so the figures leave it out.
    """
    from django_jobqueue import enqueue_job

    jid = enqueue_job(None, "bench.stamp", {"probe": True}).jid
    deadline = time.monotonic() + 300
    while not job_model.objects.filter(jid=jid, status="done").exists():
        if worker.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("runworkers did not run the probe job")
        time.sleep(0.2)


def wait_drained(job_model: Any, timeout_s: float) -> bool:
    """Wait until no job is waiting or running (at most ``timeout_s``); return whether."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not job_model.objects.exclude(status="done").exists():
            return True
        time.sleep(0.5)
    return False


def summarise(job_model: Any, phases: list[Phase], capacity: float) -> list[dict[str, Any]]:
    """Return one dict of figures per phase, from the rows (see the module docstring)."""
    pairs = []
    for payload, result in job_model.objects.values_list("payload", "result").iterator(
        chunk_size=10_000
    ):
        if isinstance(payload, dict) and "t" in payload:
            pairs.append((payload["t"], result if isinstance(result, float) else None))
    enqueued = sorted(t for t, _r in pairs)
    started = sorted(r for _t, r in pairs if r is not None)
    import bisect

    def backlog(at: float) -> int:
        return bisect.bisect_right(enqueued, at) - bisect.bisect_right(started, at)

    out = []
    for phase in phases:
        span = max(phase.end - phase.start, 1e-6)
        tail_start = phase.end - span / 5
        offered = bisect.bisect_left(enqueued, phase.end) - bisect.bisect_left(
            enqueued, phase.start
        )
        ran = bisect.bisect_left(started, phase.end) - bisect.bisect_left(started, phase.start)
        tail_ran = bisect.bisect_left(started, phase.end) - bisect.bisect_left(started, tail_start)
        tail_offered = bisect.bisect_left(enqueued, phase.end) - bisect.bisect_left(
            enqueued, tail_start
        )
        waits = [(r - t) * 1000 if r is not None else float("inf") for t, r in pairs]
        mine = [w for (t, _r), w in zip(pairs, waits, strict=True) if phase.start <= t < phase.end]
        tail = [w for (t, _r), w in zip(pairs, waits, strict=True) if tail_start <= t < phase.end]
        steps = [phase.start + i for i in range(int(span) + 1)] + [phase.end]
        top = phase.waits.most_common(4)
        out.append(
            {
                "phase": phase.name,
                "seconds": span,
                "target_per_s": phase.rate,
                "offered_per_s": offered / span,
                "throughput_per_s": ran / span,
                "ratio": ran / offered if offered else None,
                "tail_ratio": tail_ran / tail_offered if tail_offered else None,
                "of_capacity": ran / span / capacity,
                "p50_ms": percentile(mine, 0.5) if mine else None,
                "p99_ms": percentile(mine, 0.99) if mine else None,
                "tail_p99_ms": percentile(tail, 0.99) if tail else None,
                "backlog_end": backlog(phase.end),
                "backlog_max": max(backlog(at) for at in steps),
                **phase.stats,
                "waits": {word: n / max(phase.samples, 1) for word, n in top},
            }
        )
    return out


def _mb(value: Any) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ms(value: Any) -> str:
    if value is None:
        return "-"
    return "never" if value == float("inf") else f"{value:.0f}"


def print_table(result: dict[str, Any]) -> None:
    """Print the per-phase table and the targets of docs/horizon.md."""
    print(
        f"\n{result['db']}  scale {result['scale']}  drain rate {result['capacity_per_s']:.0f}/s  "
        f"load {result['load_before']} -> {result['load_after']}"
    )
    head = (
        f"{'phase':<10} {'offered/s':>9} {'ran/s':>7} {'ratio':>5} {'tail':>5} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'tail p99':>8} {'backlog':>11} "
        f"{'table MB':>8} {'idx MB':>7} {'dead':>8}  worker sessions (per sample)"
    )
    print(head)
    for row in result["phases"]:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        tail = "-" if row["tail_ratio"] is None else f"{row['tail_ratio']:.2f}"
        waits = ", ".join(f"{word} {share:.1f}" for word, share in row["waits"].items())
        dead = "-" if row.get("dead") is None else str(row["dead"])
        extra = f" wal {row['wal_mb']:.1f} MB" if row.get("wal_mb") is not None else ""
        extra += f" vacuums {row['vacuums']}" if row.get("vacuums") is not None else ""
        print(
            f"{row['phase']:<10} {row['offered_per_s']:>9.0f} {row['throughput_per_s']:>7.0f} "
            f"{ratio:>5} {tail:>5} {_ms(row['p50_ms']):>7} {_ms(row['p99_ms']):>7} "
            f"{_ms(row['tail_p99_ms']):>8} {row['backlog_end']:>5}/{row['backlog_max']:<5} "
            f"{_mb(row.get('table_mb')):>8} {_mb(row.get('indexes_mb')):>7} {dead:>8}  "
            f"{waits}{extra}"
        )
    by = {row["phase"]: row for row in result["phases"]}
    if not {"clean", "held_xmin", "overload", "recovery"} <= by.keys():
        return  # some phases only (--phases): no targets
    clean, held, over = by["clean"], by["held_xmin"], by["overload"]
    if clean["p99_ms"] and held["p99_ms"] is not None:
        print(
            f"targets: held_xmin ratio {held['ratio']:.2f} (>= 0.95), "
            f"tail {held['tail_ratio']:.2f}; "
            f"p99 {held['p99_ms'] / clean['p99_ms']:.1f}x clean (<= 3x); "
            f"overload {over['of_capacity']:.2f}x drain rate (>= 0.9); "
            f"recovery backlog at end {by['recovery']['backlog_end']}; "
            f"drained after: {result['drained_after']}"
        )


def main() -> None:
    """Parse the arguments, run, print the table and the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=sorted(VENDORS), default="postgres")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiplies every phase's length (%(default)r)"
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0.0,
        help="offered jobs/s of the normal phases; 0: half the measured drain rate",
    )
    parser.add_argument(
        "--calibrate-jobs", type=int, default=5_000, help="jobs of the drain-rate measurement"
    )
    parser.add_argument(
        "--reader-pause-ms",
        type=float,
        default=1000.0,
        help="pause of a reader between two scans, ms (%(default)r)",
    )
    parser.add_argument(
        "--naptime",
        type=float,
        default=5.0,
        help="PostgreSQL with autovacuum off: seconds between two looks at the dead "
        "row versions (%(default)r; autovacuum's own is 60 s over all databases)",
    )
    parser.add_argument(
        "--garbage",
        type=int,
        default=0,
        help="PostgreSQL: jobs written and ended at once when the snapshot is held (0)",
    )
    parser.add_argument(
        "--phases",
        default="",
        help="comma-separated names of the phases to run (all): "
        + ", ".join(name for name, *_ in PHASES)
        + "; they run in that order",
    )
    parser.add_argument("--log", default="", help="runworkers' output file")
    parser.add_argument("--json", default="", help="also write the figures to this file")
    args = parser.parse_args()
    unknown = set(filter(None, args.phases.split(","))) - {name for name, *_ in PHASES}
    if unknown:
        parser.error(
            f"unknown phase {', '.join(sorted(unknown))}; phases: "
            + ", ".join(name for name, *_ in PHASES)
        )
    result = run(args)
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
