"""The plan of the raw insert of jobs: what it never recomputes, per alias and vendor.

:mod:`django_jobqueue.store.rawinsert` writes every job with a plan of this module:
the column list, the SQL literal of each column the spec never sets, and per row
shape (which options a job leaves out) the SQL of its ``VALUES`` tuple, the getters
of its parameters and its one-row statements.

The row is the one the ORM writes (``Model.save(force_insert=True)`` of
``JobSpec.model_fields``), column for column: every column not set by the spec
gets its field's default prepared by the field itself (``get_db_prep_save``: JSON
as Django's ``JSONField`` stores it, booleans as the driver sends them); the
payload and an ``at`` datetime are prepared by their fields on each call; the times
are the database clock of :mod:`django_jobqueue.core.dbclock`, one instant per
statement (``STATEMENT_TIMESTAMP()``, ``CURRENT_TIMESTAMP(6)``, and on SQLite
``django_jobqueue_now(n)`` with one fresh ``n`` per statement), and ``now + delay``
is rendered as Django renders ``Now() + timedelta`` on each vendor.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from operator import attrgetter
from types import MappingProxyType
from typing import Any, NamedTuple

from django.apps import apps
from django.db import connections
from django.utils.duration import duration_microseconds

from ..core import dbclock
from ..core.validation import hold_hash
from .wakeups import CHANNEL

__all__ = [
    "VARIABLE",
    "Plan",
    "Row",
    "check_hold_fields",
    "connection_of",
    "insert_plan",
    "with_notify",
]

#: Columns the spec sets on every insert; every other column takes its default.
VARIABLE = frozenset(
    {
        "jid", "queue", "job_type", "job_id", "job_id_hash", "payload", "priority",
        "max_retry", "timeout_ms", "secure", "run_at", "expires_at", "unique_key",
        "unique_key_hash", "unique_mode", "unique_expires_at", "dedupe_ms", "keep_ms",
        "created_at", "updated_at", "origin", "limit_key",
    }
)  # fmt: skip
#: The further fields a caller may store with a job (``JobManager.create_job``'s hold_fields).
_HOLD_FIELDS = ("dedupe_ms", "keep_ms")
_ZERO = timedelta(0)
_NO_FIELDS: Mapping[str, Any] = MappingProxyType({})


class Row(NamedTuple):
    """One job to insert: its spec, its new jid and its hold fields (``dedupe_ms``, ``keep_ms``).

    A tuple, not a dataclass: a bulk enqueue makes one per job. ``hold_fields`` is
    read only; the default is one shared empty mapping.
    """

    spec: Any  # managers.JobSpec (this module imports no manager)
    jid: str
    hold_fields: Mapping[str, Any] = _NO_FIELDS


#: A parameter's getter: a call ``get(row, statement, conn)``, or an attribute's dotted path.
_Getter = Callable[..., Any] | str


class _Shape:
    """A row shape's SQL and parameters (see :meth:`Plan.shape`), and its one-row
    statements, one per count of wake-ups riding it (made once, not per enqueue)."""

    def __init__(self, head: str, sql: str, getters: list[_Getter]) -> None:
        self.head = head
        #: The row's VALUES tuple.
        self.sql = sql
        self._calls = [(i, get) for i, get in enumerate(getters) if not isinstance(get, str)]
        # The attribute parameters by one attrgetter, read in C in one call (a tuple:
        # every shape binds the jid, the queue and the type at least).
        self._read = attrgetter(*(get for get in getters if isinstance(get, str)))
        self._statements: dict[int, str] = {}

    def fetch(self, row: Row, statement: int, conn: Any) -> list[Any]:
        """``row``'s parameters, in order (``statement``: the SQLite clock's number)."""
        values = list(self._read(row))
        for i, get in self._calls:  # in order: the values before i are in place
            values.insert(i, get(row, statement, conn))
        return values

    def statement(self, wakes: int) -> str:
        """The INSERT of one row of this shape with ``wakes`` pg_notify riding it."""
        sql = self._statements.get(wakes)
        if sql is None:
            sql = self._statements[wakes] = with_notify(
                self.head + "VALUES " + self.sql, [], ["queue"] * wakes
            )
        return sql


class Plan:
    """What an insert on one alias and vendor never recomputes."""

    def __init__(self, using: str) -> None:
        # Through the app registry, not an import: models import managers, which
        # import this module.
        job_model = apps.get_model("django_jobqueue", "Job")
        conn = connections[using]
        self.vendor = conn.vendor
        quote = conn.ops.quote_name
        meta = job_model._meta
        self.fields = [f for f in meta.concrete_fields if not f.primary_key]
        self.by_name = {f.attname: f for f in self.fields}
        columns = ", ".join(quote(str(f.column)) for f in self.fields)
        self.table = quote(str(meta.db_table))
        self.head = f"INSERT INTO {self.table} ({columns}) "
        #: Prepared defaults of the constant columns; None renders as a NULL literal.
        self.constants = {
            f.attname: f.get_db_prep_save(f.get_default(), conn)
            for f in self.fields
            if f.attname not in VARIABLE
        }
        #: The SQL literal of each constant, as the backend's schema editor quotes a
        #: column default: written into the statement once rather than bound (and,
        #: on PostgreSQL, quoted by the client) on every call. A value it cannot
        #: quote stays a parameter.
        self.literals = _literals(conn, self.constants)
        if self.vendor == "postgresql":
            self.now = "STATEMENT_TIMESTAMP()"
            self.plus = "(STATEMENT_TIMESTAMP() + %s)"
        elif self.vendor == "mysql":
            self.now = "CURRENT_TIMESTAMP(6)"
            self.plus = "(CURRENT_TIMESTAMP(6) + INTERVAL %s MICROSECOND)"
        else:
            self.now = f"{dbclock.SQLITE_FUNCTION}(%s)"
            self.plus = f"(django_format_dtdelta('+', {dbclock.SQLITE_FUNCTION}(%s), %s))"
        self.max_params = conn.features.max_query_params
        #: Per row shape (see :meth:`shape`): its VALUES SQL, parameters and statements.
        self.shapes: dict[tuple[bool, ...], _Shape] = {}
        self.lock = threading.Lock()

    def constant(self, name: str, params: list[Any]) -> str:
        """The SQL of constant column ``name``: its literal, or a placeholder whose
        prepared default is appended to ``params``."""
        literal = self.literals.get(name)
        if literal is None:
            params.append(self.constants[name])
            return "%s"
        return literal

    def duration(self, delta: timedelta) -> Any:
        """A duration parameter as Django's ``Now() + timedelta`` passes it."""
        return delta if self.vendor == "postgresql" else duration_microseconds(delta)

    def row(self, row: Row, statement: int, params: list[Any], conn: Any) -> str:
        """Append ``row``'s parameters to ``params``; return the SQL of its VALUES tuple.

        ``statement`` is the SQLite clock's statement number (unused elsewhere).
        """
        shape = self.shape(row)
        params.extend(shape.fetch(row, statement, conn))
        return shape.sql

    def shape(self, row: Row) -> _Shape:
        """The compiled shape of ``row``: which options it leaves out decides its SQL."""
        spec = row.spec
        hold = row.hold_fields
        if hold:
            check_hold_fields(row)
        key = (
            spec.at is None,
            spec.delay == _ZERO,
            spec.expires_ms is None,
            spec.job_id is None,
            spec.unique_key is None,
            not hold or hold.get("dedupe_ms") is None,
            not hold or hold.get("keep_ms") is None,
        )
        shape = self.shapes.get(key)
        if shape is None:
            shape = _Shape(self.head, *self._compile(key))
            with self.lock:
                self.shapes[key] = shape
        return shape

    def _compile(self, shape: tuple[bool, ...]) -> tuple[str, list[_Getter]]:
        """The VALUES tuple of a row of ``shape`` (see :meth:`shape`) and a getter of
        each of its parameters, in order: a call ``get(row, statement, conn)``, or the
        dotted path of an attribute of the row.

        What the shape fixes is written into the SQL: a NULL for a column the row
        leaves empty (no id, no unique key, no expiry), and on PostgreSQL the
        statement's clock itself for a job due now; the parameters are the rest.
        """
        at_none, no_delay, no_expiry, no_id, no_key, no_dedupe, no_keep = shape
        parts: list[str] = []
        getters: list[_Getter] = []
        sqlite = self.vendor == "sqlite"
        clock: list[Callable[..., Any]] = [lambda r, n, c: n] if sqlite else []
        empty = {
            "expires_at": no_expiry,
            "job_id": no_id,
            "job_id_hash": no_id,
            "unique_key": no_key,
            "unique_key_hash": no_key,
            "unique_expires_at": no_key,
            "dedupe_ms": no_dedupe,
            "keep_ms": no_keep,
        }

        def param(get: _Getter) -> str:
            getters.append(get)
            return "%s"

        for f in self.fields:
            name = f.attname
            if name not in VARIABLE:
                constant: list[Any] = []
                parts.append(self.constant(name, constant))
                getters.extend((lambda r, n, c, v=v: v) for v in constant)
            elif empty.get(name):
                parts.append("NULL")
            elif name in ("created_at", "updated_at"):
                parts.append(self.now)
                getters.extend(clock)
            elif name == "run_at" and at_none and no_delay and self.vendor == "postgresql":
                parts.append(self.now)  # now + 0, exactly
            elif name == "run_at" and at_none:
                parts.append(self.plus)
                getters.extend(clock)
                getters.append(lambda r, n, c: self.duration(r.spec.delay))
            elif name == "run_at":
                parts.append(param(lambda r, n, c, f=f: f.get_db_prep_save(r.spec.at, c)))
            elif name in ("expires_at", "unique_expires_at"):
                parts.append(self.plus)
                getters.extend(clock)
                attr = "expires_ms" if name == "expires_at" else "unique_ttl_ms"
                getters.append(
                    lambda r, n, c, a=attr: self.duration(
                        timedelta(milliseconds=getattr(r.spec, a))
                    )
                )
            elif name == "payload":
                # The JSON text validation made (json.dumps, as the field writes it),
                # not a second encoding of the payload.
                cast = "::jsonb" if self.vendor == "postgresql" else ""
                parts.append(param(lambda r, n, c, f=f: _payload_param(f, r.spec, c)) + cast)
            elif name == "jid":
                parts.append(param("jid"))
            elif name == "job_id_hash":
                parts.append(param(lambda r, n, c: hold_hash(r.spec.job_id)))
            elif name == "unique_key_hash":
                parts.append(param(lambda r, n, c: hold_hash(r.spec.unique_key)))
            elif name == "unique_mode":
                parts.append("''" if no_key else param("spec.unique_mode"))
            elif name in _HOLD_FIELDS:
                parts.append(param(lambda r, n, c, a=name: r.hold_fields[a]))
            else:  # queue, job_type, job_id, priority, max_retry, timeout_ms, secure,
                # unique_key, origin, limit_key
                parts.append(param(f"spec.{name}"))
        return "(" + ", ".join(parts) + ")", getters

    def max_row_params(self) -> int:
        """The most parameters a row can bind (a row of every option)."""
        return len(self._compile((True, False, False, False, False, False, False))[1])


def check_hold_fields(row: Row) -> None:
    unknown = set(row.hold_fields) - set(_HOLD_FIELDS)
    if unknown:
        raise TypeError(f"Unknown job fields {sorted(unknown)}; only {_HOLD_FIELDS} are stored.")


def _literals(conn: Any, constants: dict[str, Any]) -> dict[str, str]:
    """Return the SQL literal of each of ``constants`` that ``conn`` can quote; None is NULL."""
    literals = {}
    conn.ensure_connection()  # PostgreSQL and MySQL quote with the driver's connection
    # Never entered: quote_value needs no schema change (nor, on SQLite, its pragmas).
    editor = conn.schema_editor(atomic=False, collect_sql=True)
    for name, value in constants.items():
        if value is None:
            literals[name] = "NULL"
            continue
        try:
            text = editor.quote_value(value)
        except (TypeError, ValueError):
            continue
        literals[name] = text.decode("ascii") if isinstance(text, bytes) else str(text)
    return literals


_plans: dict[tuple[str, str], Plan] = {}


def connection_of(using: str, conn: Any) -> Any:
    """``conn`` when the caller passed ``using``'s connection, else the lookup."""
    return conn if conn is not None else connections[using]


def insert_plan(using: str, conn: Any = None) -> Plan:
    """The insert plan of alias ``using`` (made once per alias and vendor); ``conn``:
    its connection, when the caller has it."""
    key = (using, connection_of(using, conn).vendor)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = Plan(using)
    return plan


def _payload_param(field: Any, spec: Any, conn: Any) -> Any:
    """The payload's parameter: its checked JSON text, or SQL NULL for None (as the
    field stores it); a spec built without validation's text is prepared by the field."""
    if spec.payload is None:
        return None
    if spec.payload_json is not None:
        return spec.payload_json
    return field.get_db_prep_save(spec.payload, conn)


def with_notify(sql: str, params: list[Any], notify: Sequence[str]) -> str:
    """Return the insert ``sql`` with a ``pg_notify`` per queue of ``notify`` riding it
    (appending their parameters to ``params``); ``sql`` itself when there is none."""
    if not notify:
        return sql
    params.extend(p for q in notify for p in (CHANNEL, q))
    return (
        f"WITH j AS ({sql} RETURNING 1) SELECT "  # noqa: S608 - quoted names, placeholders
        + ", ".join(["pg_notify(%s, %s)"] * len(notify))
        + " FROM (SELECT 1 FROM j LIMIT 1) AS one"
    )
