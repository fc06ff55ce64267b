"""Fixtures of the fault tests: the fault servers, and a database of its own on each.

The fault servers are scripts/start-fault-servers' second PostgreSQL (127.0.0.1:5433)
and second MariaDB (127.0.0.1:3307), never the suite's servers on 5432 and 3306:
:class:`FaultServer` refuses those ports, so a ``restart()`` or ``kill_backends()``
cannot reach them. Only scripts/test's faults leg (``JOBQUEUE_TEST_FAULTS=1``) runs
these tests; elsewhere they skip. A test gets a fresh, migrated database on a fault
server from :func:`fault_db` and runs workers against it as subprocesses
(``DATABASE_URL``, read by tests/settings.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
SUITE_PORTS = (5432, 3306)


@dataclass(frozen=True)
class FaultServer:
    """One fault server: ``vendor`` is ``postgresql`` or ``mysql``."""

    vendor: str
    host: str
    port: int

    def __post_init__(self) -> None:
        if self.port in SUITE_PORTS:
            raise ValueError(f"port {self.port} is the suite's own server, not a fault server")

    @property
    def script_name(self) -> str:
        return {"postgresql": "postgres", "mysql": "mariadb"}[self.vendor]

    def url(self, database: str) -> str:
        """Return the DATABASE_URL of ``database`` on this server."""
        if self.vendor == "postgresql":
            return f"postgres://postgres@{self.host}:{self.port}/{database}"
        return f"mysql://root@{self.host}:{self.port}/{database}"

    def execute(
        self, sql: str, params: tuple[Any, ...] = (), *, database: str | None = None
    ) -> list[tuple[Any, ...]]:
        """Run one statement on a fresh autocommit session; return its rows.

        ``database``: the database to connect to (default: none on MariaDB,
        ``postgres`` on PostgreSQL).
        """
        if self.vendor == "postgresql":
            import psycopg

            with psycopg.connect(
                host=self.host,
                port=self.port,
                user="postgres",
                dbname=database or "postgres",
                autocommit=True,
                connect_timeout=5,
            ) as conn:
                cursor = conn.execute(sql, params)
                return list(cursor.fetchall()) if cursor.description else []
        import MySQLdb

        conn = MySQLdb.connect(
            host=self.host,
            port=self.port,
            user="root",
            connect_timeout=5,
            **({"database": database} if database else {}),
        )
        try:
            cursor = conn.cursor()
            cursor.execute(sql, params or None)
            return list(cursor.fetchall()) if cursor.description else []
        finally:
            conn.close()

    def kill_backends(self, database: str) -> int:
        """End every session on ``database`` but the admin one; return how many.

        PostgreSQL: ``pg_terminate_backend``; MariaDB: ``KILL`` each connection.
        """
        if self.vendor == "postgresql":
            rows = self.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (database,),
            )
            return int(rows[0][0])
        ids = self.execute(
            "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
            (database,),
        )
        killed = 0
        for (session_id,) in ids:
            try:
                self.execute(f"KILL {int(session_id)}")
                killed += 1
            except Exception:  # noqa: BLE001 (it ended meanwhile)
                pass
        return killed

    def restart(self) -> None:
        """Stop and start this server (scripts/start-fault-servers restart)."""
        subprocess.run(  # noqa: S603
            [str(ROOT / "scripts" / "start-fault-servers"), "restart", self.script_name],
            check=True,
            timeout=120,
        )


@dataclass(frozen=True)
class FaultDatabase:
    """A migrated database of one test on a fault server."""

    server: FaultServer
    name: str

    @property
    def url(self) -> str:
        return self.server.url(self.name)

    def env(self, *, jobqueue: Mapping[str, object] | None = None, **extra: str) -> dict[str, str]:
        """The environment of a subprocess (worker, helper) on this database.

        ``jobqueue``: its ``JOBQUEUE`` setting (tests/settings.py reads it from
        ``JOBQUEUE_TEST_JOBQUEUE``); default: the app's defaults.
        """
        return {
            **os.environ,
            "DATABASE_URL": self.url,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "JOBQUEUE_TEST_JOBQUEUE": json.dumps(dict(jobqueue or {})),
            "JOBQUEUE_TEST_PGBOUNCER": "",
            "PYTHONUNBUFFERED": "1",
            **extra,
        }

    def query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run one statement in this database on a fresh session; return its rows."""
        return self.server.execute(sql, params, database=self.name)

    def count(self, sql: str, params: tuple[Any, ...] = ()) -> int | None:
        """Return the single number ``sql`` selects, or None while the server is down."""
        try:
            return int(self.query(sql, params)[0][0])
        except Exception:  # noqa: BLE001 (restarting: the caller asks again)
            return None

    def start_workers(
        self, *args: str, log: Path, jobqueue: Mapping[str, object] | None = None
    ) -> subprocess.Popen[str]:
        """Start ``python -m django runworkers *args`` here, its output into ``log``;
        ``jobqueue``: the workers' ``JOBQUEUE`` setting (as :meth:`env`)."""
        with log.open("w") as out:
            return subprocess.Popen(  # noqa: S603 (our own interpreter and command)
                [sys.executable, "-m", "django", "runworkers", *args],
                cwd=ROOT,
                env=self.env(jobqueue=jobqueue),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )

    def helper(self, *args: str) -> Any:
        """Run ``python -m tests.faults.helpers *args`` here; return its JSON output."""
        proc = subprocess.run(  # noqa: S603
            [sys.executable, "-m", "tests.faults.helpers", *args],
            cwd=ROOT,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])


def stop_workers(proc: subprocess.Popen[str]) -> None:
    """SIGTERM ``proc`` (runworkers), and SIGKILL it if it has not exited in 30 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def wait_until(
    check: Callable[[], bool], what: str, timeout_s: float, proc: subprocess.Popen[str]
) -> None:
    """Wait for ``check()``; fail if ``proc`` exits first or after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while not check():
        assert proc.poll() is None, f"the workers exited while waiting for {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _server(vendor: str, port_variable: str, default_port: int) -> FaultServer:
    if not os.environ.get("JOBQUEUE_TEST_FAULTS"):
        pytest.skip("fault tests run in scripts/test's faults leg only")
    server = FaultServer(vendor, "127.0.0.1", int(os.environ.get(port_variable, default_port)))
    try:
        server.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001
        pytest.fail(f"the fault server {vendor} on {server.port} does not answer: {exc}")
    return server


@pytest.fixture(scope="session")
def fault_postgres() -> FaultServer:
    """The second PostgreSQL (127.0.0.1:5433 unless JOBQUEUE_FAULTS_PG_PORT)."""
    return _server("postgresql", "JOBQUEUE_FAULTS_PG_PORT", 5433)


@pytest.fixture(scope="session")
def fault_mariadb() -> FaultServer:
    """The second MariaDB (127.0.0.1:3307 unless JOBQUEUE_FAULTS_MARIADB_PORT)."""
    return _server("mysql", "JOBQUEUE_FAULTS_MARIADB_PORT", 3307)


@pytest.fixture(params=["postgresql", "mysql"])
def fault_server(request: pytest.FixtureRequest) -> FaultServer:
    """Each fault server in turn."""
    name = {"postgresql": "fault_postgres", "mysql": "fault_mariadb"}[request.param]
    return request.getfixturevalue(name)


@pytest.fixture
def fault_db(fault_server: FaultServer) -> Iterator[FaultDatabase]:
    """A fresh database on ``fault_server``, migrated; dropped after the test."""
    name = f"faults_{uuid.uuid4().hex[:12]}"
    charset = "" if fault_server.vendor == "postgresql" else " CHARACTER SET utf8mb4"
    fault_server.execute(f"CREATE DATABASE {name}{charset}")
    database = FaultDatabase(fault_server, name)
    try:
        proc = subprocess.run(  # noqa: S603
            [sys.executable, "-m", "django", "migrate", "--noinput", "--verbosity", "0"],
            cwd=ROOT,
            env=database.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        yield database
    finally:
        fault_server.kill_backends(name)
        fault_server.execute(f"DROP DATABASE IF EXISTS {name}")
