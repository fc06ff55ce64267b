"""Advisory locks per database vendor: the creation lock (docs/design.md#creation).

Creation of a job that carries an id (docs/design.md#ids) or a unique key
(docs/design.md#unique-keys) runs
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
  (docs/design.md#execution). Names are
  ``jq:`` plus 48 hex digits of SHA-256 (51 characters, under MySQL's 64).
- **SQLite**: no named lock exists or is needed: a write transaction serialises all
  writers. Creation always opens it with ``BEGIN IMMEDIATE`` (whatever the
  connection's ``transaction_mode``) and waits for it at most the lock timeout
  (``PRAGMA busy_timeout``); "database is locked" is retried by the caller within
  the lock timeout.

Before any of these, a thread takes the in-process *stripes* of the names (64
``threading.Lock``s chosen by the names' hashes, in ascending stripe order), so
threads of one process that create the same id queue up here rather than in the
database. It is an optimisation only: the database lock is the guarantee. A thread
whose own transaction is open on the jobs' database takes no stripe, since it may
hold database locks that a stripe holder waits for.

Names are always taken in sorted order, so two creators never deadlock on two keys.
When the caller's own transaction is open, PostgreSQL holds the lock until it ends;
MySQL releases it after the insert, and the unique index over (queue, hash) is the
last line (docs/design.md#execution).

Raw SQL lives only in this module.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from django.db import DatabaseError, OperationalError, connections, transaction

from ..core.conf import get_config
from ..core.exceptions import LockTimeout

T = TypeVar("T")

__all__ = [
    "retry_when_locked",
    "STRIPES",
    "close_lock_connections",
    "creation_lock",
    "is_lock_held",
    "lock_key",
    "mysql_lock_error",
    "mysql_lock_name",
    "sqlite_locked",
    "stripes_of",
    "write_transaction",
]

logger = logging.getLogger(__name__)

#: Number of in-process stripes (``threading.Lock``) over the creation lock names.
STRIPES = 64
_STRIPE_LOCKS = tuple(threading.Lock() for _ in range(STRIPES))

_local = threading.local()


def lock_key(name: str) -> int:
    """Return the signed 64-bit PostgreSQL advisory lock key of ``name``."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def mysql_lock_name(name: str) -> str:
    """Return the ``GET_LOCK`` name of ``name``: ``jq:`` + 48 hex digits (51 chars)."""
    return "jq:" + hashlib.sha256(name.encode()).hexdigest()[:48]


def stripes_of(names: Sequence[str]) -> list[int]:
    """Return the in-process stripes of ``names``: distinct, in ascending order.

    A name's stripe is its PostgreSQL lock key modulo :data:`STRIPES`, so it is the
    same in every process and run.
    """
    return sorted({lock_key(name) % STRIPES for name in names})


def sqlite_locked(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's transient "database is locked"/"busy" error."""
    text = str(exc).lower()
    return isinstance(exc, OperationalError) and ("database is locked" in text or "busy" in text)


def retry_when_locked(
    using: str, func: Callable[..., T], *args: Any, timeout_ms: int | None = None, **kwargs: Any
) -> T:
    """Call ``func(*args, **kwargs)``, retrying "database is locked" and MySQL lock errors.

    SQLite allows one writer at a time; a writer that finds the database locked is
    retried with a growing pause (10 ms up to 250 ms) until ``timeout_ms`` has
    passed. Inside the caller's open transaction nothing can be retried (the
    transaction may have lost its work), so the first such error ends the call with
    a :class:`LockTimeout` that an outer call of this function, made outside any
    transaction around the whole transaction, retries in turn.

    MySQL's deadlock (1213) and lock-wait timeout (1205) are retried once, at
    once, when no transaction of the caller's is open; a second one, or one inside
    the caller's transaction (1213 has rolled it back), is raised as
    :class:`LockTimeout`. Other errors pass through unchanged.

    Parameters
    ----------
    using:
        Database alias ``func`` writes to.
    func:
        The call to make; when called outside a transaction, it should open and
        end its own, so a retry starts afresh.
    timeout_ms:
        How long to keep retrying, in milliseconds; None: ``JOBQUEUE["LOCK_TIMEOUT_MS"]``.

    Returns
    -------
    T
        What ``func`` returned.

    Raises
    ------
    LockTimeout
        If the database stayed locked for ``timeout_ms`` milliseconds, or was locked
        while the caller's transaction was open, or MySQL answered 1213/1205 twice or
        inside the caller's transaction (the message says which). Nothing was
        written by the call.

    Implements: docs/design.md#creation.
    """
    if timeout_ms is None:
        timeout_ms = get_config().LOCK_TIMEOUT_MS
    start = time.monotonic()
    deadline = start + timeout_ms / 1000
    pause = 0.01
    mysql_retried = False
    while True:
        try:
            return func(*args, **kwargs)
        except OperationalError as exc:
            if mysql_lock_error(exc):
                if mysql_retried or connections[using].in_atomic_block:
                    raise _mysql_lock_timeout(using, exc, retried=mysql_retried) from exc
                # InnoDB rolled the statement (1205) or the transaction (1213) back,
                # and func's own transaction with it: one fresh try, at once.
                mysql_retried = True
                logger.warning("lock error on %s, retrying once: %s", using, exc.args[0])
                continue
            if not sqlite_locked(exc):
                raise
            _sqlite_give_up(using, exc, start, deadline, timeout_ms)
        except LockTimeout as exc:
            if not getattr(exc, "retry_outside_transaction", False):
                raise
            _sqlite_give_up(using, exc, start, deadline, timeout_ms)
        time.sleep(pause)
        pause = min(pause * 2, 0.25)


def mysql_lock_error(exc: BaseException) -> bool:
    """Whether ``exc`` is MySQL's deadlock (1213) or lock-wait timeout (1205)."""
    return isinstance(exc, OperationalError) and bool(exc.args) and exc.args[0] in (1205, 1213)


def _mysql_lock_timeout(using: str, exc: OperationalError, *, retried: bool) -> LockTimeout:
    what = "a deadlock" if exc.args[0] == 1213 else "a lock-wait timeout"
    if retried:
        why = "again on the one retry"
    else:
        why = "inside the caller's transaction (InnoDB may have rolled it back): not retried"
    return LockTimeout(
        f"The database {using!r} answered {what} ({exc.args[0]}) {why}; nothing was "
        "written by this call: retry it (the whole transaction, if one was open), or "
        "shorten the transactions that lock the same jobs."
    )


def _sqlite_give_up(
    using: str, exc: BaseException, start: float, deadline: float, timeout_ms: int
) -> None:
    """Raise the LockTimeout of a "database is locked" that must not be retried."""
    if connections[using].in_atomic_block:
        error = LockTimeout(
            f"The database {using!r} was locked while a transaction was open on it, "
            "so the write could not wait (SQLite allows one writer at a time, and a "
            "transaction that has read cannot wait for the write lock); set "
            f"DATABASES[{using!r}]['OPTIONS']['transaction_mode'] = 'IMMEDIATE', or "
            "retry the whole transaction."
        )
        error.retry_outside_transaction = True  # type: ignore[attr-defined]
        raise error from exc
    if time.monotonic() >= deadline:
        waited_ms = int((time.monotonic() - start) * 1000)
        raise LockTimeout(
            f"The database {using!r} stayed locked for {waited_ms} ms, past the "
            f"lock timeout of {timeout_ms} ms (SQLite allows one writer at a time); "
            "retry, or shorten the transactions that write."
        ) from exc


@contextlib.contextmanager
def creation_lock(using: str, names: Sequence[str], *, timeout_ms: int) -> Iterator[None]:
    """Hold the creation locks of ``names`` around a data transaction on ``using``.

    The body runs inside ``transaction.atomic(using=using)`` (a savepoint when the
    caller's transaction is open), with every lock held. On PostgreSQL a body that
    raises rolls its savepoint back, which frees the lock at once; on a normal exit
    the lock lasts until the caller's transaction ends.

    Parameters
    ----------
    using:
        Database alias of the jobs.
    names:
        Lock names, such as ``"id\\x00emails\\x00<hash>"``; taken in sorted order.
    timeout_ms:
        How long to wait for all the locks together (stripes, then the database's),
        in milliseconds.

    Raises
    ------
    LockTimeout
        If a lock was not granted within ``timeout_ms``. Nothing was written.

    Implements: docs/design.md#creation.
    """
    ordered = sorted(set(names))
    conn = connections[using]
    deadline = time.monotonic() + max(timeout_ms, 0) / 1000
    # A thread in its own transaction may hold database locks (PostgreSQL's, SQLite's
    # write lock, MySQL's row locks) that a stripe holder waits for: no stripe then.
    stripes = [] if conn.in_atomic_block else stripes_of(ordered)
    with _stripes(stripes, deadline, timeout_ms):
        vendor = conn.vendor
        if vendor == "postgresql":
            with transaction.atomic(using=using):
                _pg_lock(using, ordered, _remaining_ms(deadline))
                yield
        elif vendor == "mysql":
            with (
                _mysql_locks(using, ordered, _remaining_ms(deadline)),
                transaction.atomic(using=using),
            ):
                yield
        else:
            with _sqlite_write_transaction(using, _remaining_ms(deadline)):
                yield


@contextlib.contextmanager
def write_transaction(using: str) -> Iterator[None]:
    """Run the body in one write transaction on ``using`` (a savepoint inside the caller's).

    On SQLite the transaction takes the write lock at ``BEGIN`` (``IMMEDIATE``),
    waiting up to ``JOBQUEUE["LOCK_TIMEOUT_MS"]``, so a body that reads and then writes
    never meets a lock upgrade that fails at once; elsewhere it is
    ``transaction.atomic``. Wrap the call in :func:`retry_when_locked` to retry a
    "database is locked" that still comes.
    """
    if connections[using].vendor == "sqlite":
        with _sqlite_write_transaction(using, get_config().LOCK_TIMEOUT_MS):
            yield
    else:
        with transaction.atomic(using=using):
            yield


def _remaining_ms(deadline: float) -> int:
    return max(int((deadline - time.monotonic()) * 1000), 1)


@contextlib.contextmanager
def _stripes(stripes: list[int], deadline: float, timeout_ms: int) -> Iterator[None]:
    taken: list[threading.Lock] = []
    try:
        for stripe in stripes:
            lock = _STRIPE_LOCKS[stripe]
            if not lock.acquire(timeout=max(deadline - time.monotonic(), 0)):
                raise LockTimeout(
                    f"Timed out after {timeout_ms} ms waiting for another thread of this "
                    "process creating the same id or unique key; raise "
                    "JOBQUEUE['LOCK_TIMEOUT_MS'] or shorten that creation."
                )
            taken.append(lock)
        yield
    finally:
        for lock in reversed(taken):
            lock.release()


@contextlib.contextmanager
def _sqlite_write_transaction(using: str, timeout_ms: int) -> Iterator[None]:
    """Run the body in an immediate write transaction, waiting at most ``timeout_ms``."""
    conn = connections[using]
    if conn.in_atomic_block:  # the caller's transaction: it has its own write lock
        with transaction.atomic(using=using):
            yield
        return
    conn.ensure_connection()
    mode = getattr(conn, "transaction_mode", None)
    with conn.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        previous = cursor.fetchone()[0]
        cursor.execute(f"PRAGMA busy_timeout = {int(timeout_ms)}")
    try:
        # Take the write lock at BEGIN, so the re-check and the insert never meet a
        # lock upgrade that fails at once (SQLITE_BUSY_SNAPSHOT in WAL mode).
        conn.transaction_mode = "IMMEDIATE"  # type: ignore[attr-defined]  # SQLite wrapper only
        with transaction.atomic(using=using):
            conn.transaction_mode = mode  # type: ignore[attr-defined]
            yield
    finally:
        conn.transaction_mode = mode  # type: ignore[attr-defined]
        if conn.connection is not None:
            with conn.cursor() as cursor:
                cursor.execute(f"PRAGMA busy_timeout = {int(previous)}")


def _pg_lock(using: str, names: list[str], timeout_ms: int) -> None:
    from psycopg import errors as pg_errors  # deferred: psycopg is optional (postgres extra)

    with connections[using].cursor() as cursor:
        # lock_timeout is set for this transaction only, then put back, so the
        # caller's later statements keep their own limit.
        cursor.execute(
            "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)",
            [f"{max(timeout_ms, 1)}ms"],
        )
        previous = cursor.fetchone()[0]
        try:
            if len(names) == 1:
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [lock_key(names[0])])
            else:
                # One statement for all: the function scan yields the keys in the
                # names' sorted order, and each lock is taken in turn.
                cursor.execute(
                    "SELECT count(pg_advisory_xact_lock(k)) FROM unnest(%s::bigint[]) AS t(k)",
                    [[lock_key(name) for name in names]],
                )
        except DatabaseError as exc:
            if isinstance(exc.__cause__, pg_errors.LockNotAvailable):
                raise LockTimeout(
                    f"Timed out after {timeout_ms} ms waiting for the creation lock; another "
                    "transaction creating the same id or unique key is still open."
                ) from exc
            raise
        cursor.execute("SELECT set_config('lock_timeout', %s, true)", [previous])


class _ThreadLockConnections:
    """One thread's dedicated MySQL lock connections, by alias; closed when it ends.

    The only reference to this object is the thread's slot in a ``threading.local``,
    which Python drops as the thread ends: the finalizer then closes the connections
    at once, by reference count. Django's connection wrappers sit in reference
    cycles, so without it each dead thread's connection stayed open on the server
    until a garbage collection (71 against a baseline of 1, measured).
    """

    def __init__(self) -> None:
        self.wrappers: dict[str, Any] = {}
        weakref.finalize(self, _close_wrappers, self.wrappers)


def _close_wrappers(wrappers: dict[str, Any]) -> None:
    # May run in the ending thread or at exit: close the driver's connection itself
    # (Django's close() checks the calling thread), ignoring a link already dead.
    for wrapper in wrappers.values():
        raw, wrapper.connection = wrapper.connection, None
        if raw is not None:
            with contextlib.suppress(Exception):
                raw.close()
    wrappers.clear()


def _thread_pool() -> dict[str, Any]:
    pool = getattr(_local, "pool", None)
    if pool is None:
        pool = _local.pool = _ThreadLockConnections()
    return pool.wrappers


def _lock_connection(using: str) -> Any:
    """Return this thread's dedicated MySQL connection for ``using``, connected.

    It stays open between creations (``CONN_MAX_AGE`` does not apply: it carries no
    transaction), is closed when an error left it unusable, and is closed when the
    thread ends (:class:`_ThreadLockConnections`).
    """
    pool = _thread_pool()
    wrapper = pool.get(using)
    if wrapper is None:
        wrapper = connections.create_connection(using)
        pool[using] = wrapper
    if wrapper.connection is not None and wrapper.errors_occurred and not wrapper.is_usable():
        wrapper.close()
    wrapper.errors_occurred = False
    wrapper.ensure_connection()
    return wrapper


def close_lock_connections() -> None:
    """Close this thread's dedicated MySQL lock connections (a thread about to end).

    Closing a connection frees any lock it holds; none is held between creations.
    A thread that ends without calling this has them closed as it ends.
    """
    pool = _thread_pool()
    for wrapper in pool.values():
        wrapper.close()
    pool.clear()


@contextlib.contextmanager
def _mysql_locks(using: str, names: list[str], timeout_ms: int) -> Iterator[None]:
    deadline = time.monotonic() + timeout_ms / 1000
    for attempt in (1, 2):
        wrapper = _lock_connection(using)
        held: list[str] = []
        try:
            with wrapper.cursor() as cursor:
                for name in names:
                    lock_name = mysql_lock_name(name)
                    wait_s = max(deadline - time.monotonic(), 0)
                    cursor.execute("SELECT GET_LOCK(%s, %s)", [lock_name, wait_s])
                    if cursor.fetchone()[0] != 1:
                        raise LockTimeout(
                            f"Timed out after {timeout_ms} ms waiting for the creation lock "
                            f"{lock_name}; another creator of the same id or unique key "
                            "holds it: raise JOBQUEUE['LOCK_TIMEOUT_MS'] or commit sooner."
                        )
                    held.append(lock_name)
        except OperationalError:
            # A lock connection the server dropped (wait_timeout, restart) holds
            # nothing: reconnect once and take the locks again.
            _mysql_release(wrapper, held)
            if attempt == 2 or wrapper.is_usable():
                raise
            logger.warning("creation lock connection lost, reconnecting alias=%s", using)
            wrapper.close()
            continue
        except BaseException:
            _mysql_release(wrapper, held)
            raise
        break
    try:
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
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted "
                "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
                "AND classid::text::bigint = %s AND objid::text::bigint = %s AND objsubid = 1",
                [(key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF],
            )
            return bool(cursor.fetchone()[0])
        if vendor == "mysql":
            cursor.execute("SELECT IS_USED_LOCK(%s)", [mysql_lock_name(name)])
            return cursor.fetchone()[0] is not None
    return False
