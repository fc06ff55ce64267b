"""A write transaction whose statements travel in flights: one round trip each on PostgreSQL.

`transaction` opens a write transaction and gives a :class:`Flights`, whose
:meth:`Flights.run` sends a list of statements and returns each one's rows. On
PostgreSQL (psycopg 3, a session in autocommit outside any transaction of the caller)
the statements of one ``run`` go in one pipeline (psycopg's pipeline mode): one round
trip, the server running them in order, each with its own snapshot as at READ
COMMITTED, so a statement sees what committed while an earlier one of the flight
waited for a lock. The transaction's ``BEGIN`` rides with the first flight and its
``COMMIT`` with the last; a transaction of one flight sends neither, as the
statements of a pipeline up to its Sync are one implicit transaction. Elsewhere
(MariaDB, SQLite, a caller's transaction, psycopg 2) the statements run one by one
in :func:`~django_jobqueue.store.locks.write_transaction` (SQLite: immediate).

Between flights the body may not use the ORM on the alias while the pipelined
transaction is open (an ``atomic()`` there would meet a transaction Django does not
know of): it sends raw statements only, as :mod:`django_jobqueue.storage_limits`
does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from django.db import connections

from ..core import prepared
from . import locks

__all__ = ["Flights", "Sql", "transaction"]


class Sql(NamedTuple):
    """One statement of a flight."""

    #: The text, ``%s`` placeholders.
    text: str
    #: Its parameters.
    params: Sequence[Any] = ()
    #: Prepare it on PostgreSQL (:mod:`django_jobqueue.core.prepared`): only for a
    #: text that repeats claim after claim, not one that lists keys.
    prepare: bool = False


def _pipelines(using: str) -> bool:
    """Whether ``using``'s claim transaction may pipeline its statements."""
    conn = connections[using]
    if conn.vendor != "postgresql" or conn.in_atomic_block or not conn.get_autocommit():
        return False
    return prepared.pipelines(conn)


class Flights:
    """The statements of one claim transaction, sent a list at a time (:meth:`run`)."""

    def __init__(self, using: str, *, pipelined: bool) -> None:
        self.using = using
        #: Each run is one pipeline with our own BEGIN and COMMIT (PostgreSQL).
        self.pipelined = pipelined
        #: A pipelined transaction is open on the server (its BEGIN was sent).
        self.open = False

    def run(
        self, statements: Sequence[Sql], *, commit: bool = False
    ) -> list[list[tuple[Any, ...]]]:
        """Run ``statements`` in order; return each one's rows ([] for none).

        ``commit``: this is the transaction's last flight; pipelined, its COMMIT
        goes with it (else the transaction's end commits). Errors are Django's
        database errors; the transaction is then rolled back by
        :func:`transaction`.
        """
        conn = connections[self.using]
        if not statements and not (commit and self.open):
            return []
        if not self.pipelined:
            answers = []
            for statement in statements:
                cursor = prepared.cursor(conn) if statement.prepare else conn.cursor()
                with cursor:
                    cursor.execute(statement.text, list(statement.params) or None)
                    rows = cursor.fetchall() if cursor.description is not None else []
                answers.append([tuple(row) for row in rows])
            return answers
        # A transaction of this one flight needs no BEGIN and COMMIT: the statements
        # of a pipeline up to its Sync are one implicit transaction, committed at
        # the Sync (rolled back there if one failed). Two statements fewer, and as
        # many fewer results to read, on the limited claim's commonest path.
        whole = commit and not self.open
        begin = [] if self.open or whole else [Sql("BEGIN")]
        end = [Sql("COMMIT")] if commit and not whole else []
        sent = [*begin, *statements, *end]
        with contextlib.ExitStack() as stack:
            cursors = [
                stack.enter_context(prepared.cursor(conn) if s.prepare else conn.cursor())
                for s in sent
            ]
            self.open = not whole
            with conn.wrap_database_errors, conn.connection.pipeline():
                for cursor, statement in zip(cursors, sent, strict=True):
                    cursor.execute(statement.text, list(statement.params) or None)
            answers = [
                [tuple(row) for row in cursor.fetchall()] if cursor.description is not None else []
                for cursor in cursors
            ]
        if commit:
            self.open = False
        return answers[len(begin) : len(sent) - len(end)]

    def rollback(self) -> None:
        """Roll back an open pipelined transaction.

        A dead session is left as it is, closed or broken in psycopg's eyes: the
        server rolled it back, and the caller's
        :func:`~django_jobqueue.core.reconnect.retry_on_disconnect` tells the
        disconnect by that state (a pipeline's error of a lost socket carries no
        SQLSTATE) and repeats the claim on a new connection. A live session whose
        ROLLBACK failed is closed: its transaction state is unknown.
        """
        if not self.open:
            return
        self.open = False
        conn = connections[self.using]
        raw = conn.connection
        if raw is not None and (raw.closed or getattr(raw, "broken", False)):
            return
        try:
            with conn.cursor() as cursor:
                cursor.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 (the session's state is unknown: drop it)
            raw = conn.connection
            if raw is None or not (raw.closed or getattr(raw, "broken", False)):
                conn.close()


@contextlib.contextmanager
def transaction(using: str) -> Iterator[Flights]:
    """Open a write transaction on ``using``; yield its :class:`Flights`.

    Pipelined on PostgreSQL outside a caller's transaction (see the module
    docstring): a body that ends with a flight run with ``commit=True`` has
    committed; one that does not is committed here (a round trip). Any error rolls
    the transaction back before it propagates. Elsewhere, the statements run in
    :func:`~django_jobqueue.store.locks.write_transaction`, one by one.
    """
    if not _pipelines(using):
        with locks.write_transaction(using):
            yield Flights(using, pipelined=False)
        return
    flights = Flights(using, pipelined=True)
    try:
        yield flights
        if flights.open:
            flights.run([], commit=True)
    except BaseException:
        flights.rollback()
        raise
