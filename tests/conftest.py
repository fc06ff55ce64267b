"""Shared fixtures of the test suite.

Database basics first (which database is under test, how a subprocess reaches
it); fixtures for the app's own objects follow below them.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any
from urllib.parse import quote

import django
import environ
import pytest
from django.conf import settings
from django.db import connection, connections

#: connection.vendor values, as Django names them.
VENDORS = ("postgresql", "mysql", "sqlite")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "vendor(*names): run only on these database vendors "
        "(connection.vendor: postgresql, mysql, sqlite); skipped elsewhere",
    )
    config.addinivalue_line(
        "markers",
        "pgbouncer: also run by scripts/test's pgbouncer leg (PostgreSQL through "
        "PgBouncer in transaction pooling mode, pytest -m pgbouncer)",
    )
    config.addinivalue_line(
        "markers",
        "faults: runs on the fault servers of scripts/start-fault-servers "
        "(tests/faults; scripts/test's faults leg)",
    )
    config.addinivalue_line(
        "markers",
        "clients: builds the gateway clients of clients/ and runs their conformance suite "
        "(scripts/test's clients leg, JOBQUEUE_TEST_CLIENTS=1)",
    )


def pytest_report_header(config: pytest.Config) -> str:
    db = connection.settings_dict
    test_name = db["TEST"].get("NAME") or f"test_{db['NAME']}"
    where = test_name
    if connection.vendor != "sqlite":
        where = f"{db['HOST']}:{db['PORT']}/{test_name}"
    return f"database: {connection.vendor} ({where}), Django {django.get_version()}"


def pytest_runtest_setup(item: pytest.Item) -> None:
    for marker in item.iter_markers(name="vendor"):
        unknown = set(marker.args) - set(VENDORS)
        if unknown:
            raise pytest.UsageError(f"vendor marker: unknown vendor(s) {sorted(unknown)}")
        if connection.vendor not in marker.args:
            pytest.skip(f"runs only on {', '.join(marker.args)}, not {connection.vendor}")


@pytest.fixture
def db_vendor() -> str:
    """Return the vendor of the database under test: postgresql, mysql or sqlite."""
    return connection.vendor


def database_url(alias: str = "default") -> str:
    """Return a DATABASE_URL for the database ``alias`` uses now.

    Inside a test that is the *test* database, so a subprocess started with it
    in its environment (``tests.settings`` reads DATABASE_URL) sees the same rows.
    """
    db = connections[alias].settings_dict
    vendor = connections[alias].vendor
    if vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    scheme = {"postgresql": "postgres", "mysql": "mysql"}[vendor]
    user = quote(db["USER"] or "", safe="")
    password = quote(db["PASSWORD"] or "", safe="")
    auth = f"{user}:{password}@" if password else (f"{user}@" if user else "")
    return f"{scheme}://{auth}{db['HOST']}:{db['PORT']}/{db['NAME']}"


def through_pgbouncer() -> bool:
    """Return whether the suite reaches PostgreSQL through PgBouncer (the pgbouncer leg)."""
    return connection.vendor == "postgresql" and bool(os.environ.get("JOBQUEUE_TEST_PGBOUNCER"))


def direct_postgres_url(alias: str = "default") -> str:
    """Return a URL of the database ``alias`` uses now, on the PostgreSQL server itself.

    That is :func:`database_url`, except on the pgbouncer leg, where it names the
    server behind PgBouncer (``JOBQUEUE_TEST_PGBOUNCER``, e.g.
    ``postgres://postgres@127.0.0.1:5432/test``) with the same database name: a
    session there is one server session, whatever the pooler does.
    """
    if not through_pgbouncer():
        return database_url(alias)
    server = environ.Env.db_url_config(os.environ["JOBQUEUE_TEST_PGBOUNCER"])
    db = connections[alias].settings_dict
    user = quote(server["USER"] or db["USER"] or "", safe="")
    return f"postgres://{user}@{server['HOST']}:{server['PORT']}/{db['NAME']}"


@pytest.fixture
def subprocess_env(db: None) -> dict[str, str]:
    """Return an environment for a subprocess that must use the test database."""
    return {
        **os.environ,
        "DATABASE_URL": database_url(),
        "DJANGO_SETTINGS_MODULE": settings.SETTINGS_MODULE,
    }


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Any:
    """End sessions still open on the PostgreSQL test database before it is dropped.

    A worker thread abandoned by a timed-out test handler keeps its connection
    until the handler returns (Python cannot kill a thread), and PostgreSQL refuses
    to drop a database with sessions. Leaks of the foreman itself are caught by
    ``test_foreman__leaves_no_database_session_open``; this only keeps a slow test
    handler from failing the teardown, and says how many it ended.
    """
    yield
    with django_db_blocker.unblock():
        if connection.vendor != "postgresql":
            return
        if through_pgbouncer():
            # PgBouncer keeps idle server sessions on the test database, which
            # DROP DATABASE refuses: end them on the server itself.
            import psycopg

            url = direct_postgres_url()
            connections.close_all()
            with psycopg.connect(url, autocommit=True) as direct:
                direct.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            return
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
            ended = cursor.fetchone()[0]
        if ended:
            print(f"\nconftest: ended {ended} stray session(s) on the test database")  # noqa: T201


#: The claim floor's own tests, which set its thresholds themselves.
FLOOR_TESTS = (
    "test_claim_floor",
    "test_claim_floor_recheck",
    "test_claim_floor_looks",
    "test_claim_floor_long_poll",
)


@pytest.fixture(autouse=True)
def _no_claim_floor_by_load(request: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No claim of a test (in this process) starts at a claim floor because the machine
    was slow: a loaded run's 5 ms claim would turn it on (store/claimfloor.py) and
    change which statement or order a test sees. The floor's own tests (FLOOR_TESTS)
    turn it on themselves."""
    from django_jobqueue.store import claimfloor

    if request.module.__name__.rpartition(".")[2] not in FLOOR_TESTS:
        monkeypatch.setattr(claimfloor, "SLOW_CLAIM_MS", 1e9)  # ms: a claim of 11 days


@pytest.fixture(autouse=True)
def _fresh_stats_state(request: Any) -> Any:
    """Start and end every test with no job statistics of an earlier test in this process.

    The counts a test's jobs leave in ``jobstats.process_stats`` would otherwise be
    written by a later test (into its rows) or at exit (into a dropped test
    database). Its flush timer is off but in ``transaction=True`` tests: a timer
    thread writes on a connection of its own, outside the test's transaction, where
    its rows would outlive the test; elsewhere a test writes them with ``flush``.
    """
    from django_jobqueue.store.claimfloor import floors, looker
    from django_jobqueue.store.jobstats import process_stats

    marker = request.node.get_closest_marker("django_db")
    process_stats.clear()
    process_stats.flush_timer = bool(marker and marker.kwargs.get("transaction"))
    floors.clear()  # a claim floor is a key of an earlier test's rows
    yield
    # A look below a claim floor still running in the looker thread reads the job
    # and pause tables, and would deadlock with the flush's TRUNCATE of both.
    assert looker.wait(30), "a look below a claim floor ran on for 30 s"
    process_stats.clear()
    process_stats.flush_timer = True
    floors.clear()


def _flush_retrying_deadlocks() -> None:
    """Make a transactional test's closing ``flush`` try again when PostgreSQL broke a
    deadlock by failing its ``TRUNCATE``.

    A server a test runs in a subprocess (the gateway of tests/client) writes its job
    statistics from a timer, after the responses the test read: such a write can meet
    the ``TRUNCATE`` of every table, each waiting for a table the other locked. The
    server's write is tried again on its next tick; the flush, failed, would leave the
    test's rows to the next test.
    """
    from django.core.management.base import CommandError
    from django.test.testcases import TransactionTestCase

    original = TransactionTestCase._fixture_teardown
    if getattr(original, "retries_deadlocks", False):
        return

    def teardown(self: Any) -> None:
        for attempt in range(1, 4):
            try:
                original(self)
                return
            except CommandError as exc:
                if attempt == 3 or "deadlock detected" not in str(exc.__cause__):
                    raise
                time.sleep(0.2 * attempt)

    teardown.retries_deadlocks = True  # type: ignore[attr-defined]
    TransactionTestCase._fixture_teardown = teardown  # type: ignore[method-assign]


_flush_retrying_deadlocks()


#: How long a test's end waits for the worker threads it started, in seconds.
RUNNER_GRACE_S = 30.0


@pytest.fixture(autouse=True)
def _no_worker_thread_outlives_its_test() -> Any:
    """End every test only once the foreman worker threads it started have ended.

    A forced stop hands running jobs back without waiting for their handlers, and a
    timed-out handler's thread is abandoned: those threads run on after the
    foreman returns. A late write of one (a ``RunRecord`` row, say) must not land
    in the next test's tables, where it would read as a run of that test's. The
    wait comes before the database's flush (pytest-django's fixtures are set up
    first, so torn down last); a thread still alive after :data:`RUNNER_GRACE_S`
    fails the test that left it.
    """
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + RUNNER_GRACE_S
    started = [t for t in threading.enumerate() if t not in before]
    workers = [t for t in started if t.name.startswith("jq-worker-")]
    for thread in workers:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = sorted(t.name for t in workers if t.is_alive())
    assert not alive, f"worker threads still running {RUNNER_GRACE_S:.0f} s after the test: {alive}"


@pytest.fixture(autouse=True)
def _no_runworkers_outlives_its_test() -> Any:
    """Abort every ``runworkers`` a test started (``run_workers(wait=False)``) that
    still runs when the test ends, and fail that test with its thread stacks.

    Left running, it would claim the next tests' jobs and materialize their
    schedules on the same test database, and they would fail in its place.
    """
    from tests.workers_helpers import abort_leaked

    yield
    reports = abort_leaked()
    assert not reports, "runworkers still running at the end of its test:\n" + "\n".join(reports)


@pytest.fixture
def pro() -> Any:
    """A valid Pro licence signed by a key pair the settings trust; yields its token."""
    from datetime import UTC, datetime, timedelta

    from django.test import override_settings

    from django_jobqueue.store.licence import generate_key_pair, issue_licence

    private_pem, public_pem = generate_key_pair()
    token = issue_licence(
        private_pem, licensee="Tests Ltd", expires_at=datetime.now(UTC) + timedelta(days=30)
    )
    with override_settings(JOBQUEUE={"LICENCE_KEY": token, "LICENCE_PUBLIC_KEYS": [public_pem]}):
        yield token
