"""Prepared statements for the hot paths on PostgreSQL: the insert, the claim, the outcome.

Django's psycopg 3 cursors bind parameters on the client and never prepare, so
PostgreSQL parses and plans each statement anew. For the statements a queue runs
thousands of times a second that planning costs more than running them: a plain
insert of a job plans in about 0.15 ms and runs in less, and the id and unique-key
insert (:func:`django_jobqueue.store.rawkeyed.insert_unless_held`) plans in about
0.8 ms. :func:`cursor` gives these statements a server-binding cursor that prepares
each one on its first run on a connection and reuses the plan after that (psycopg
keeps up to ``prepared_max``, 100 by default, per connection).

A transaction pooler (PgBouncer before 1.21, or without ``max_prepared_statements``)
keeps no prepared statement from one transaction to the next. Its users set
psycopg's switch, ``DATABASES[...]["OPTIONS"]["prepare_threshold"] = None``, which
the README's PgBouncer notes already ask for; when that key is in ``OPTIONS``, its
value decides (None: never prepare; a number: psycopg's own threshold). Elsewhere,
and on MySQL, MariaDB and SQLite, :func:`cursor` is Django's ``connection.cursor()``.

A prepared statement that fails because the server no longer has it as psycopg
thinks (a ``DISCARD ALL`` or ``DEALLOCATE`` psycopg did not see, or a migration on
another session that changed a returned column's type) runs once more, outside a
transaction or as the first statement of one (psycopg's own ``BEGIN`` and it are
rolled back first); a statement lost, or its name taken (by a statement of the same
name, or of another number of parameters: 08P01 at the bind), between transactions
means a pooler: the alias then prepares nothing more (one warning).

Either way the cursor is wrapped as Django wraps its own: it shows in
``CaptureQueriesContext``, passes the execute wrappers and translates errors.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.backends.utils import CursorWrapper

logger = logging.getLogger(__name__)

__all__ = ["cursor", "forget_if_plan_changed", "pipelines", "statement_lost"]

try:
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg import Cursor as _ServerCursor
    from psycopg import errors as _pg_errors
    from psycopg.postgres import types as _pg_types
    from psycopg.pq import Format as _Format
    from psycopg.pq import PipelineStatus as _PipelineStatus
    from psycopg.pq import TransactionStatus as _TxStatus
except ImportError:  # psycopg2, or no PostgreSQL driver at all
    _ServerCursor = None  # type: ignore[assignment,misc]


#: Aliases found behind a transaction pooler: a statement this session prepared was
#: gone, or its name taken, on the server session of the next transaction.
_pooled: set[str] = set()

if _ServerCursor is not None:

    class _PreparingCursor(_ServerCursor):
        """A server-binding cursor that prepares every statement it runs."""

        #: The Django alias of the connection (set by :func:`cursor`).
        alias = "default"

        def execute(
            self, query: Any, params: Any = None, *, prepare: bool | None = None, **kw: Any
        ) -> Any:
            prepare = True if prepare is None else prepare
            raw = self.connection
            # No transaction holds an earlier statement: in autocommit, or as the
            # first statement of a Django atomic block, before which psycopg sends
            # its own BEGIN (that transaction then holds only this statement). Never
            # in a pipeline, whose errors are those of any statement sent before.
            # (libpq's own numbers: raw.info.transaction_status makes an enum of it.)
            pgconn = raw.pgconn
            outside = (
                pgconn.transaction_status == _TxStatus.IDLE
                and pgconn.pipeline_status == _PipelineStatus.OFF
            )
            try:
                return super().execute(query, params, prepare=prepare, **kw)
            except (
                _pg_errors.InvalidSqlStatementName,
                _pg_errors.DuplicatePreparedStatement,
                _pg_errors.FeatureNotSupported,
                _pg_errors.ProtocolViolation,
            ) as exc:
                if isinstance(exc, _pg_errors.ProtocolViolation) and not _other_statement(exc):
                    raise
                if isinstance(exc, _pg_errors.FeatureNotSupported):
                    if not plan_changed(exc):
                        raise
                    # A migration on another session changed a returned column's
                    # type: forget every statement, and they prepare anew.
                    retry_prepared = True
                else:
                    # The server session lost the statement, or has another under
                    # its name (another client's, with a different number of
                    # parameters: 08P01 at the bind): a pooler hands this session's
                    # transactions to different server sessions. The alias prepares
                    # no more.
                    retry_prepared = False
                    _found_pooled(self.alias, exc)
                # Outside a transaction the statement did not run: once more. Inside
                # one the caller's rollback (which psycopg sees) is the reset.
                if not outside:
                    raise
                if not raw.autocommit:  # psycopg began a transaction for it
                    raw.rollback()  # psycopg's BEGIN and the failed statement: nothing else
                if retry_prepared:
                    self.connection.execute("DEALLOCATE ALL")
                return super().execute(query, params, prepare=retry_prepared, **kw)


#: PostgreSQL's message when a prepared statement's row type changed under it (in
#: English; :func:`plan_changed` also knows it in the server's other languages).
RESULT_TYPE_CHANGED = "cached plan must not change result type"

#: The start of PostgreSQL's 08P01 message when a statement is bound with another
#: number of parameters than the statement of that name on the session has:
#: ``bind message supplies 12 parameters, but prepared statement "_pg3_0" requires
#: 23``. Behind a transaction pooler it means the name is another client's.
OTHER_STATEMENT = "bind message supplies"

#: The server functions that raise those two errors (``diag.source_function``):
#: unlike the message, the same whatever the server's ``lc_messages``.
_PLAN_CHANGED_SOURCE = "RevalidateCachedQuery"
_BIND_SOURCE = "exec_bind_message"


def _source_function(exc: BaseException) -> str | None:
    diag = getattr(exc, "diag", None)
    return getattr(diag, "source_function", None) if diag is not None else None


def _other_statement(exc: BaseException | None) -> bool:
    """Whether ``exc`` (a psycopg error) is PostgreSQL's refusal to bind a prepared
    statement whose name, on this server session, is another statement's
    (:data:`OTHER_STATEMENT`), in any language of the server's messages: an 08P01
    raised while binding (``exec_bind_message``)."""
    if _ServerCursor is None or not isinstance(exc, _pg_errors.ProtocolViolation):
        return False
    return str(exc).startswith(OTHER_STATEMENT) or _source_function(exc) == _BIND_SOURCE


def plan_changed(exc: BaseException | None) -> bool:
    """Whether ``exc`` (a psycopg error) is PostgreSQL's refusal to run a prepared
    statement whose returned columns changed type (:data:`RESULT_TYPE_CHANGED`), in
    any language of the server's messages."""
    if _ServerCursor is None or not isinstance(exc, _pg_errors.FeatureNotSupported):
        return False
    return RESULT_TYPE_CHANGED in str(exc) or _source_function(exc) == _PLAN_CHANGED_SOURCE


def forget_if_plan_changed(conn: Any, exc: BaseException) -> bool:
    """Whether ``exc`` is PostgreSQL's refusal of a prepared statement whose returned
    columns changed type (a migration on another session); if so, forget every
    statement prepared on the Django connection ``conn`` (``DEALLOCATE ALL``, outside
    any transaction), so the caller may run its transaction once more.

    For a caller whose statements failed inside a transaction it began (a pipelined
    flight, :mod:`django_jobqueue.store.flights`), where :class:`_PreparingCursor`
    cannot repeat the statement itself. Returns False, forgetting nothing, for any
    other error or while ``conn`` is inside a transaction or closed.
    """
    if not any(plan_changed(error) for error in (exc, exc.__cause__)):
        return False
    raw = conn.connection
    if raw is None or raw.closed or raw.info.transaction_status != _TxStatus.IDLE:
        return False
    raw.execute("DEALLOCATE ALL")
    return True


def pipelines(conn: Any) -> bool:
    """Whether the Django connection ``conn`` can send statements in a pipeline:
    PostgreSQL on psycopg 3 with a libpq that has pipeline mode (it connects first).

    Callers add their own conditions (a transaction of their own, or not).
    """
    if conn.vendor != "postgresql" or _ServerCursor is None:
        return False
    conn.ensure_connection()
    if getattr(type(conn.connection), "pipeline", None) is None:  # psycopg2
        return False
    import psycopg

    return bool(psycopg.Pipeline.is_supported())


def statement_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (a Django database error, or psycopg's own) is PostgreSQL's
    refusal of a statement psycopg prepared: gone from the session, its name taken,
    or its returned columns changed type (see the module docstring).

    For a caller that sent the statement in a pipeline, where
    :class:`_PreparingCursor` cannot tell which statement failed and run it again.
    """
    if _ServerCursor is None:
        return False
    for error in (exc, exc.__cause__):
        if isinstance(
            error, _pg_errors.InvalidSqlStatementName | _pg_errors.DuplicatePreparedStatement
        ):
            return True
        if _other_statement(error) or plan_changed(error):
            return True
    return False


def _found_pooled(alias: str, exc: Exception) -> None:
    if alias in _pooled:
        return
    _pooled.add(alias)
    logger.warning(
        "database %r: a prepared statement was lost between transactions (%s); "
        "behind a transaction pooler set OPTIONS prepare_threshold None "
        "(README, Database notes); prepared statements are off for this alias now",
        alias,
        exc,
    )


def prepares(conn: Any) -> bool:
    """Whether :func:`cursor` prepares on the Django connection ``conn``."""
    if conn.vendor != "postgresql" or _ServerCursor is None:
        return False
    options = conn.settings_dict.get("OPTIONS") or {}
    if options.get("server_side_binding") or "prepare_threshold" in options:
        return False  # the project's own choice: psycopg's threshold decides
    # psycopg 3 is importable, so Django's PostgreSQL backend runs on it.
    return conn.alias not in _pooled


def cursor(conn: Any) -> Any:
    """Return a cursor of the Django connection ``conn`` that prepares its statements.

    Parameters
    ----------
    conn:
        A Django database connection (``django.db.connections[alias]``); it is
        opened if it is not (with Django's health check, as ``conn.cursor()``).

    Returns
    -------
    A Django cursor wrapper, used as ``with cursor(conn) as c: c.execute(sql, params)``.
    Placeholders are ``%s`` either way. On PostgreSQL with psycopg 3 and no
    ``prepare_threshold`` in ``OPTIONS``, it binds on the server and prepares;
    otherwise it is ``conn.cursor()``.

    Raises
    ------
    django.db.Error
        As ``conn.cursor()`` does, if the connection cannot be opened.
    """
    if not prepares(conn):
        return conn.cursor()
    conn.close_if_health_check_failed()  # as conn.cursor() does
    conn.ensure_connection()
    raw = conn.connection
    kept = getattr(conn, _KEPT, None)
    if (
        kept is not None
        and not kept.busy
        and kept.cursor.connection is raw
        and kept.timezone is conn.timezone
        and not conn.queries_logged
    ):
        conn.validate_thread_sharing()  # as conn._prepare_cursor() does
        kept.busy = True
        return kept
    if raw.prepare_threshold is None:
        # Django's default: psycopg then refuses even prepare=True. A threshold no
        # count reaches lets our statements prepare and nothing else (Django's
        # client-binding cursors never prepare).
        raw.prepare_threshold = _NO_THRESHOLD
    with conn.wrap_database_errors:
        server_cursor = _PreparingCursor(raw)
        server_cursor.alias = conn.alias
        _load_times_as_django(conn, server_cursor)
    if conn.queries_logged or (kept is not None and kept.busy):
        # A debug cursor (CaptureQueriesContext, DEBUG) logs from its creation on,
        # so it is made afresh; so is one for a use inside the kept one's.
        return conn._prepare_cursor(server_cursor)
    conn.validate_thread_sharing()
    kept = _KeptCursor(server_cursor, conn)
    setattr(conn, _KEPT, kept)
    return kept


#: The attribute of a Django connection that holds its kept cursor.
_KEPT = "_jobqueue_prepared_cursor"


class _KeptCursor(CursorWrapper):
    """The cursor :func:`cursor` keeps on a connection for the next statement.

    Making a server-binding cursor and Django's wrapper around it cost about a
    third of a plain enqueue's own Python, so one is made
    per connection and kept: ``with`` marks it in use and, on leaving, free again
    rather than closed. A use that raises closes it, and the next use makes
    another. It belongs to the psycopg connection it was made on: a reconnect or a
    change of the connection's time zone makes a new one.
    """

    def __init__(self, cursor: Any, db: Any) -> None:
        super().__init__(cursor, db)
        self.busy = True
        self.timezone = db.timezone

    def __exit__(self, type: Any, value: Any, traceback: Any) -> None:
        self.busy = False
        if type is not None:
            if getattr(self.db, _KEPT, None) is self:
                delattr(self.db, _KEPT)
            super().__exit__(type, value, traceback)  # closes it


def _load_times_as_django(conn: Any, server_cursor: Any) -> None:
    # As Django's create_cursor: timestamps read in the connection's time zone.
    loader = conn.connection.adapters.get_loader(_pg_types["timestamptz"].oid, _Format.TEXT)
    if conn.timezone != loader.timezone:
        register_tzloader(conn.timezone, server_cursor)


#: A prepare_threshold no statement's run count reaches.
_NO_THRESHOLD = 2**62
