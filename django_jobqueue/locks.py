"""Advisory locks per database vendor: the creation lock of seed 004.

Creation of a job that carries an id (seed 002) or a unique key (seed 000) runs
inside :func:`creation_lock`, which serialises all creators of the same names:

- **PostgreSQL**: ``pg_advisory_xact_lock`` inside the data transaction, on a 64-bit
  key: the first 8 bytes (signed, big-endian) of SHA-256 over the lock name. The lock
  manager namespace is apart from row locks, so it cannot deadlock with the claim
  scan, and the lock ends with the transaction whoever ends it (works behind
  PgBouncer in transaction pooling). A hash collision can only make two creators of
  different names wait for each other; the re-check compares the full hashes.
- **MySQL/MariaDB**: ``GET_LOCK`` on a *dedicated* connection (one per thread and
  alias), held across the data transaction and released in ``finally`` on that same
  connection, so the release always runs whatever happens to the data transaction
  (seed 004's leak came from releasing on a handle that had committed). Names are
  ``jq:`` plus 48 hex digits of SHA-256 (51 characters, under MySQL's 64).
- **SQLite**: no named lock exists or is needed: a write transaction serialises all
  writers. "database is locked" is retried by the caller within the lock timeout.

Names are always taken in sorted order, so two creators never deadlock on two keys.
When the caller's own transaction is open, PostgreSQL holds the lock until it ends;
MySQL releases it after the insert, and the unique index over (queue, hash) is the
last line (seed 004's gap, closed).

Raw SQL lives only in this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import DatabaseError, OperationalError, connections, transaction

from .exceptions import LockTimeout

__all__ = ["creation_lock", "is_lock_held", "lock_key", "mysql_lock_name", "sqlite_locked"]

_local = threading.local()


def lock_key(name: str) -> int:
    """Return the signed 64-bit PostgreSQL advisory lock key of ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def mysql_lock_name(name: str) -> str:
    """Return the ``GET_LOCK`` name of ``name``: ``jq:`` + 48 hex digits (51 chars)."""
    return "jq:" + hashlib.sha256(name.encode()).hexdigest()[:48]


def sqlite_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's transient "database is locked"/"busy" error."""
    text = str(exc).lower()
    return isinstance(exc, OperationalError) and ("database is locked" in text or "busy" in text)


@contextlib.contextmanager
def creation_lock(using: str, names: Sequence[str], *, timeout_ms: int) -> Iterator[None]:
    """Hold the creation locks of ``names`` around a data transaction on ``using``.

    The body runs inside ``transaction.atomic(using=using)`` (a savepoint when the
    caller's transaction is open), with every lock held.

    Parameters
    ----------
    using:
        Database alias of the jobs.
    names:
        Lock names, such as ``"id\\x00emails\\x00<hash>"``; taken in sorted order.
    timeout_ms:
        How long to wait for each lock, in milliseconds.

    Raises
    ------
    LockTimeout
        If a lock was not granted within ``timeout_ms``. Nothing was written.

    Implements: seed 004 "Duplicate-job locking" (CreateJob/InjectJob).
    """
    ordered = sorted(set(names))
    vendor = connections[using].vendor
    if vendor == "postgresql":
        with transaction.atomic(using=using):
            _pg_lock(using, ordered, timeout_ms)
            yield
    elif vendor == "mysql":
        with _mysql_locks(using, ordered, timeout_ms), transaction.atomic(using=using):
            yield
    else:
        with transaction.atomic(using=using):
            yield


def _pg_lock(using: str, names: list[str], timeout_ms: int) -> None:
    from psycopg import errors as pg_errors

    with connections[using].cursor() as cursor:
        # lock_timeout is set for this transaction only, then put back, so the
        # caller's later statements keep their own limit.
        cursor.execute(
            "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)",
            [f"{max(timeout_ms, 1)}ms"],
        )
        previous = cursor.fetchone()[0]
        try:
            for name in names:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key(name)])
        except DatabaseError as exc:
            if isinstance(exc.__cause__, pg_errors.LockNotAvailable):
                raise LockTimeout(
                    f"Timed out after {timeout_ms} ms waiting for the creation lock; another "
                    "transaction creating the same id or unique key is still open."
                ) from exc
            raise
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])


def _lock_connection(using: str) -> Any:
    """Return this thread's dedicated MySQL connection for ``using``, connected."""
    pool: dict[str, Any] = getattr(_local, "connections", None) or {}
    _local.connections = pool
    wrapper = pool.get(using)
    if wrapper is None:
        wrapper = connections.create_connection(using)
        pool[using] = wrapper
    wrapper.close_if_unusable_or_obsolete()
    wrapper.ensure_connection()
    return wrapper


@contextlib.contextmanager
def _mysql_locks(using: str, names: list[str], timeout_ms: int) -> Iterator[None]:
    wrapper = _lock_connection(using)
    held: list[str] = []
    timeout_s = max(timeout_ms, 0) / 1000
    try:
        with wrapper.cursor() as cursor:
            for name in names:
                lock_name = mysql_lock_name(name)
                cursor.execute("SELECT GET_LOCK(%s, %s)", [lock_name, timeout_s])
                if cursor.fetchone()[0] != 1:
                    raise LockTimeout(
                        f"Timed out after {timeout_ms} ms waiting for the creation lock "
                        f"{lock_name}; another creator of the same id or unique key holds it."
                    )
                held.append(lock_name)
        yield
    finally:
        _mysql_release(wrapper, held)


def _mysql_release(wrapper: Any, held: list[str]) -> None:
    if not held:
        return
    try:
        with wrapper.cursor() as cursor:
            for lock_name in reversed(held):
                cursor.execute("SELECT RELEASE_LOCK(%s)", [lock_name])
    except DatabaseError:
        # The server frees a session's locks when it closes: close it so none leaks.
        wrapper.close()


def is_lock_held(using: str, name: str) -> bool:
    """Whether any session holds the creation lock ``name`` (tests and diagnostics).

    PostgreSQL reads ``pg_locks``; MySQL/MariaDB ask ``IS_USED_LOCK``; SQLite has no
    named locks and answers False.
    """
    vendor = connections[using].vendor
    with connections[using].cursor() as cursor:
        if vendor == "postgresql":
            key = lock_key(name)
            cursor.execute(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                "AND classid = %s AND objid = %s AND granted",
                [(key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF],
            )
            return bool(cursor.fetchone()[0])
        if vendor == "mysql":
            cursor.execute("SELECT IS_USED_LOCK(%s)", [mysql_lock_name(name)])
            return cursor.fetchone()[0] is not None
    return False
