"""Dead connections: tell a disconnect from other errors, and repeat a write once.

A worker's connection sits idle between its statements; a proxy's idle timeout,
``idle_session_timeout`` (PostgreSQL), ``wait_timeout`` (MySQL/MariaDB), a killed
backend, a failover or a server restart closes it, and the next statement on it
fails although the server is up. :func:`retry_on_disconnect` runs a write, and when
it meets such a disconnect (and no transaction of the caller's is open) closes the
dead connection and runs it once more on a new one.

That is safe for the writes it wraps, because each is one of:

- **fenced by the lease token** (complete, fail, finish cancelled, hand back,
  reap): the update filters ``processing`` and the claim's token, and the outcome
  clears the token, so a repeat of a write that did commit (only its reply was
  lost) updates nothing, and a job claimed by someone else since is never
  touched. The caller then hears "lease lost" for a write that was in fact
  stored: the job is not run again, but its finished signal is not sent;
- **idempotent** (heartbeat: extending a lease twice; the registry beat);
- **a claim**, whose repeat first looks for rows leased under its own token (a
  claim whose COMMIT landed but whose reply was lost) and returns those instead of
  claiming more (:func:`django_jobqueue.storage.claim`).

Detection goes by error class and code, or connection state, never by message:
an ``OperationalError``/``InterfaceError`` (Django's or the driver's) that is, on
PostgreSQL, SQLSTATE class 08 (connection exception) or 57P01/57P02/57P03/57P05
(administrator, crash or idle-session termination, server starting), or any error
after which psycopg reports the connection closed or broken; on MySQL/MariaDB,
client errors 2006 (gone away), 2013 and 2055 (lost during query), server errors
4031 (closed for inactivity), 1927 (connection killed) and 1053 (shutdown), or
mysqlclient's ``InterfaceError`` of a closed connection. SQLite has no
connection to lose.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from django.db import connections
from django.db.utils import InterfaceError, OperationalError
from django.utils import timezone

__all__ = [
    "MYSQL_DISCONNECT_CODES",
    "POSTGRES_DISCONNECT_SQLSTATES",
    "close_dead",
    "idle_for",
    "in_one_line",
    "is_disconnect",
    "log_failure",
    "mark_used",
    "retry_on_disconnect",
    "unreachable",
    "write_through_outage",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: MySQL/MariaDB error codes that mean the session is gone.
MYSQL_DISCONNECT_CODES = frozenset({1053, 1927, 2006, 2013, 2055, 4031})
#: PostgreSQL SQLSTATEs (beside class 08) that mean the session is gone.
POSTGRES_DISCONNECT_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "57P05"})

#: Attribute of a Django connection wrapper: monotonic time of its last known use.
_USED_AT = "_jq_used_at"


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's own exception behind Django's wrapper (or ``exc`` itself)."""
    cause = exc.__cause__
    return cause if cause is not None else exc


def _raw_broken(raw: Any) -> bool:
    """Whether a driver connection says it is closed or broken (psycopg 3 and 2)."""
    if raw is None:
        return False
    if getattr(raw, "broken", False):  # psycopg 3
        return True
    closed = getattr(raw, "closed", False)
    return bool(closed) if isinstance(closed, (bool, int)) else False


def _operational(exc: BaseException, using: str) -> bool:
    """Whether ``exc`` is an ``OperationalError`` or ``InterfaceError``, Django's or
    the driver's of ``using``."""
    database = getattr(connections[using], "Database", None)
    classes: tuple[type[BaseException], ...] = (OperationalError, InterfaceError)
    if database is not None:
        classes += (database.OperationalError, database.InterfaceError)
    return isinstance(exc, classes)


def is_disconnect(exc: BaseException, using: str) -> bool:
    """Whether ``exc``, raised by a statement on ``using``, means its connection died.

    Parameters
    ----------
    exc:
        The exception a database call raised (Django's wrapper or the driver's).
    using:
        Alias of the connection the call ran on, in this thread.

    Returns
    -------
    bool
        True for the disconnects listed in this module's docstring, False for any
        other error (a constraint, a deadlock, a syntax error, a lock timeout).
    """
    conn = connections[using]
    database = getattr(conn, "Database", None)
    if not _operational(exc, using):
        return False
    driver = _driver_error(exc)
    if conn.vendor == "postgresql":
        sqlstate = getattr(driver, "sqlstate", None) or ""
        if sqlstate.startswith("08") or sqlstate in POSTGRES_DISCONNECT_SQLSTATES:
            return True
        return _raw_broken(conn.connection)
    if conn.vendor == "mysql":
        code = driver.args[0] if driver.args and isinstance(driver.args[0], int) else None
        if code in MYSQL_DISCONNECT_CODES:
            return True
        # mysqlclient: InterfaceError(0, "") on a connection closed under it.
        return isinstance(exc, InterfaceError) or (
            database is not None and isinstance(driver, database.InterfaceError)
        )
    return False


def unreachable(exc: BaseException, using: str) -> bool:
    """Whether ``exc``, raised by a call on ``using`` in this thread, is the database
    out of reach: a disconnect (:func:`is_disconnect`), or an ``OperationalError`` or
    ``InterfaceError`` after which this thread has no connection (a connect that
    failed: the server down or unreachable). Any other exception (a bug's, raised
    before the first statement as much as after) is not."""
    if is_disconnect(exc, using):
        return True
    return _operational(exc, using) and connections[using].connection is None


def in_one_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its class name if it has none): a log
    line's reason, without the traceback."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def log_failure(
    log: logging.Logger, using: str, message: str, *args: Any, level: int = logging.WARNING
) -> None:
    """Log on ``log``, at ``level``, that a step failed with the exception being handled.

    Call it in an ``except`` block. While the database ``using`` is unreachable from
    this thread (a database error after which :func:`unreachable` holds: an outage, a
    partition, a server restart) the line ends with the error's first line and carries
    no traceback, at WARNING: a worker retries its steps every second or so through an
    outage, and each traceback would say only that again. Any other error keeps its
    traceback, at ``level``.

    Parameters
    ----------
    log:
        The caller's logger, so the line keeps its module's name.
    using:
        Alias of the connection the failed step used in this thread.
    message, args:
        The line, ``%``-style, as for :meth:`logging.Logger.warning`; when the
        database is unreachable, ``": database unreachable (<first line>)"`` is added.
    level:
        The level of a failure that is not an outage (``logging.ERROR`` for a bug's).

    Raises
    ------
    django.utils.connection.ConnectionDoesNotExist
        ``using`` is not an alias of ``DATABASES``.
    """
    exc = sys.exc_info()[1]
    if exc is not None and unreachable(exc, using):
        log.warning(message + ": database unreachable (%s)", *args, in_one_line(exc))
    else:
        log.log(level, message, *args, exc_info=True)


def mark_used(using: str) -> None:
    """Note that this thread's connection ``using`` answered just now."""
    mark_wrapper_used(connections[using])


def mark_wrapper_used(conn: Any) -> None:
    """:func:`mark_used` of a connection wrapper the caller holds (``connections[alias]``
    of this thread), without looking it up again."""
    setattr(conn, _USED_AT, time.monotonic())


def idle_for(using: str) -> float | None:
    """Seconds since this thread's connection ``using`` last answered a known call.

    Known calls are the writes of :func:`retry_on_disconnect` and the checks that
    call :func:`mark_used`. None when no such call was seen on it. A connection
    may have served other queries since (a handler's): the answer is an upper bound.
    """
    return wrapper_idle_for(connections[using])


def wrapper_idle_for(conn: Any) -> float | None:
    """:func:`idle_for` of a connection wrapper the caller holds (``connections[alias]``
    of this thread): each look-up through ``connections`` goes through asgiref's
    ``Local``, a few % of a no-op job's worker time at two per job."""
    used_at = getattr(conn, _USED_AT, None)
    return None if used_at is None else time.monotonic() - used_at


def close_dead(using: str) -> None:
    """Close this thread's connection ``using``, which is dead; never raise."""
    conn = connections[using]
    try:
        conn.close()
    except Exception:  # noqa: BLE001 (closing a dead connection may fail; drop it)
        conn.connection = None


def retry_on_disconnect(
    using: str,
    func: Callable[..., T],
    *args: Any,
    repeat: Callable[[], T] | None = None,
    **kwargs: Any,
) -> T:
    """Call ``func(*args, **kwargs)``; after a disconnect, reconnect and call it once more.

    Parameters
    ----------
    using:
        Alias of the connection ``func`` uses in this thread.
    func:
        One write (or one short transaction of its own), safe to repeat: see the
        module docstring for why each worker write is.
    repeat:
        What to call instead of ``func`` the second time (a claim first looks for
        what its lost first try leased); None: ``func`` again.

    Returns
    -------
    T
        What the successful call returned.

    Raises
    ------
    Exception
        Whatever ``func`` raised that is not a disconnect; a disconnect when a
        transaction of the caller's is open on ``using`` (its work is gone with the
        connection: the caller must handle it; nothing is repeated); the second
        call's error, disconnect or not.
    """
    try:
        value = func(*args, **kwargs)
    except Exception as exc:
        if connections[using].in_atomic_block or not is_disconnect(exc, using):
            raise
        logger.warning(
            "database connection lost on %s, reconnecting and repeating once: %s",
            using,
            in_one_line(exc),
        )
        close_dead(using)
        value = repeat() if repeat is not None else func(*args, **kwargs)
    mark_used(using)
    return value


def write_through_outage(
    log: logging.Logger,
    using: str,
    write: Callable[[], T],
    *,
    until: datetime | None,
    what: str,
    stopped: Callable[[], bool] = lambda: False,
) -> T:
    """Call ``write()``; while it fails because ``using`` is unreachable from this
    thread (:func:`unreachable`), call it again 0.1 s, 0.2 s ... 1 s apart, until
    ``until``.

    For the outcome of a job (a write guarded by its lease token, safe to repeat: see
    this module's docstring), outside any transaction of the caller's. A server
    restart or a failover lasts longer than the one reconnect of
    :func:`retry_on_disconnect`; giving up at once would leave the job to the
    reaper, to run a second time after an outage shorter than its lease. Not longer
    than the lease: a write after it is refused by the lease token anyway, the job
    being the reaper's. It blocks the calling thread meanwhile; the dead connection
    is closed before each pause, and a try that starts before ``until`` may end a
    connect timeout after it.

    Parameters
    ----------
    log:
        The caller's logger: each pause logs ``database unreachable; <what> again in
        <s> s`` there.
    using:
        Alias of the connection ``write`` uses in this thread.
    write:
        The write, called with no argument.
    until:
        An aware datetime: no try starts after it (1 s before the earliest lease of
        the jobs written ends); None: no second try.
    what:
        The log line's words for the write (``"storing 18 results"``).
    stopped:
        Asked before each pause: True gives up now (the caller is stopping).

    Returns
    -------
    T
        What ``write`` returned.

    Raises
    ------
    Exception
        What ``write`` raised last: at once an error that is not the database out of
        reach; an outage's when ``until`` comes, or ``stopped()`` says so.
    """
    pause = 0.1
    while True:
        try:
            return write()
        except Exception as exc:
            if (
                not unreachable(exc, using)
                or until is None
                or timezone.now() + timedelta(seconds=pause) >= until
                or stopped()
            ):
                raise
            log.warning("database unreachable; %s again in %.1f s", what, pause)
            close_dead(using)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)
