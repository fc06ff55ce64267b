"""The insert of jobs as raw SQL: one statement per job or per chunk, no ORM compilation.

:class:`~django_jobqueue.store.managers.JobManager` writes every job through here. The
statement goes through Django's own connection (on PostgreSQL a cursor that
prepares it: :mod:`django_jobqueue.core.prepared`), so it joins the caller's
transaction, shows in ``CaptureQueriesContext`` and passes Django's execute
wrappers; what does not change between calls (the column list, the SQL of a
row of each shape, the prepared defaults) is computed once per alias and vendor.

The row is the one the ORM writes (``Model.save(force_insert=True)`` of
``JobSpec.model_fields``), column for column: every column not set by the spec
gets its field's default prepared by the field itself (``get_db_prep_save``: JSON
as Django's ``JSONField`` stores it, booleans as the driver sends them); the
payload and an ``at`` datetime are prepared by their fields on each call; the times
are the database clock of :mod:`django_jobqueue.core.dbclock`, one instant per
statement (``STATEMENT_TIMESTAMP()``, ``CURRENT_TIMESTAMP(6)``, and on SQLite
``django_jobqueue_now(n)`` with one fresh ``n`` per statement), and ``now + delay``
is rendered as Django renders ``Now() + timedelta`` on each vendor.

Wake-ups. On PostgreSQL the ``pg_notify`` of a due job rides the insert itself
(``WITH j AS (INSERT ... RETURNING 1) SELECT pg_notify(...) FROM j``): PostgreSQL
delivers a NOTIFY only when its transaction commits, so one statement in
autocommit, or the caller's transaction, gives the same guarantee as
``on_commit`` (a rollback sends nothing) without a second statement. The
in-process :data:`~django_jobqueue.store.wakeups.local_event` is set from
``transaction.on_commit``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from operator import attrgetter
from types import MappingProxyType
from typing import Any, NamedTuple

from django.apps import apps
from django.db import connections, transaction
from django.utils.duration import duration_microseconds

from ..core import dbclock, prepared
from ..core.conf import get_config
from ..core.validation import hold_hash
from .wakeups import CHANNEL, local_event

__all__ = [
    "Row",
    "insert_rows",
    "new_jids",
    "insert_plan",
    "rows_per_statement",
    "wakes_by_notify",
    "wake_local",
]

#: Rows per multi-row INSERT at most (PostgreSQL, MySQL; SQLite also by its variable limit).
MAX_ROWS = 1000
#: Bytes of payload per MySQL statement at most, well under ``max_allowed_packet`` (16 MB).
MAX_STATEMENT_BYTES = 4 * 1024 * 1024

#: Columns the spec sets on every insert; every other column takes its default.
_VARIABLE = frozenset(
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
    """A row shape's SQL and parameters (see :meth:`_Plan.shape`), and its one-row
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
            sql = self._statements[wakes] = _with_notify(
                self.head + "VALUES " + self.sql, [], ["queue"] * wakes
            )
        return sql


class _Plan:
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
            if f.attname not in _VARIABLE
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
            _check_hold_fields(row)
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
            if name not in _VARIABLE:
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


def _check_hold_fields(row: Row) -> None:
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


#: Byte maps that set a UUID's version (4) and variant (RFC 4122) bits, applied to
#: every jid of a batch at once by ``bytes.translate``.
_VERSION_4 = bytes(b & 0x0F | 0x40 for b in range(256))
_VARIANT = bytes(b & 0x3F | 0x80 for b in range(256))


def new_jids(count: int) -> list[str]:
    """Return ``count`` new jids: random version-4 UUIDs as 32 hex digits (``uuid4().hex``).

    One read of the system's random source for the lot, where ``uuid.uuid4()``
    makes one per jid (a tenth of a bulk enqueue's time went there).
    """
    raw = bytearray(os.urandom(16 * count))
    if count == 1:  # a single enqueue's: the same bits, without the slices
        raw[6] = raw[6] & 0x0F | 0x40
        raw[8] = raw[8] & 0x3F | 0x80
        return [raw.hex()]
    raw[6::16] = raw[6::16].translate(_VERSION_4)
    raw[8::16] = raw[8::16].translate(_VARIANT)
    text = raw.hex()
    return [text[i : i + 32] for i in range(0, 32 * count, 32)]


_plans: dict[tuple[str, str], _Plan] = {}


def _connection(using: str, conn: Any) -> Any:
    """``conn`` when the caller passed ``using``'s connection, else the lookup."""
    return conn if conn is not None else connections[using]


def insert_plan(using: str, conn: Any = None) -> _Plan:
    """The insert plan of alias ``using`` (made once per alias and vendor); ``conn``:
    its connection, when the caller has it."""
    key = (using, _connection(using, conn).vendor)
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = _Plan(using)
    return plan


def _payload_param(field: Any, spec: Any, conn: Any) -> Any:
    """The payload's parameter: its checked JSON text, or SQL NULL for None (as the
    field stores it); a spec built without validation's text is prepared by the field."""
    if spec.payload is None:
        return None
    if spec.payload_json is not None:
        return spec.payload_json
    return field.get_db_prep_save(spec.payload, conn)


def wakes_by_notify(using: str, conn: Any = None) -> bool:
    """Whether a due job's insert on ``using`` carries a ``pg_notify``; ``conn``: its
    connection, when the caller has it."""
    return _connection(using, conn).vendor == "postgresql" and get_config().NOTIFY


def wake_local(using: str, conn: Any = None) -> None:
    """Set :data:`~django_jobqueue.store.wakeups.local_event` once ``using``'s transaction
    commits; ``conn``: its connection, when the caller has it."""
    if _connection(using, conn).in_atomic_block:
        transaction.on_commit(local_event.set, using=using)
    elif not local_event.is_set():  # autocommit: committed already, as on_commit would
        local_event.set()


def rows_per_statement(using: str, sample: Row) -> int:
    """Return how many rows like ``sample`` (any row: the count is the widest row's)
    one multi-row INSERT on ``using`` carries."""
    plan = insert_plan(using)
    if plan.max_params is None:
        return MAX_ROWS
    # The widest row's count: the rows of one statement may differ in shape.
    return max(1, min(MAX_ROWS, plan.max_params // max(plan.max_row_params(), 1)))


def insert_rows(
    using: str, rows: Sequence[Row], *, wake_queues: Iterable[str] = (), conn: Any = None
) -> None:
    """Insert ``rows`` on ``using`` in as few statements as the database allows.

    Parameters
    ----------
    using:
        Database alias of the jobs; the statements run in its current transaction
        (autocommit when none is open: then more than one statement needs the
        caller's ``atomic`` to be all or nothing).
    rows:
        The jobs, inserted in this order.
    wake_queues:
        Queues to wake once the transaction commits: on PostgreSQL a ``pg_notify``
        per queue rides the first statement (or the only one); every vendor sets
        the in-process event from ``on_commit``.
    conn:
        ``using``'s connection, when the caller has it (``connections[using]``).

    Raises
    ------
    IntegrityError
        If a row breaks a unique index (a hold taken by a creator the locks let through).
    """
    queues = list(dict.fromkeys(wake_queues))
    if not rows and not queues:
        return
    conn = _connection(using, conn)
    plan = insert_plan(using, conn)
    notify = queues if wakes_by_notify(using, conn) else []
    with prepared.cursor(conn) as cursor:
        if len(rows) == 1:
            _insert_one(plan, conn, cursor, rows[0], notify)
        elif plan.vendor == "postgresql" and len(rows) > 1:
            for start in range(0, len(rows), MAX_ROWS):
                _insert_columns(plan, conn, cursor, rows[start : start + MAX_ROWS], notify)
                notify = []  # the first statement carries the wake-ups
        else:
            _insert_values(plan, conn, cursor, rows, notify)
    if queues:
        wake_local(using, conn)


def _insert_one(plan: _Plan, conn: Any, cursor: Any, row: Row, notify: Sequence[str]) -> None:
    """Insert ``row`` by its shape's one-row statement, the wake-ups riding it: the
    statement a multi-row insert of it would send, its text made once per shape and
    count of wake-ups."""
    shape = plan.shape(row)
    params = shape.fetch(row, dbclock.statement_number(), conn)
    for queue in notify:
        params += (CHANNEL, queue)
    cursor.execute(shape.statement(len(notify)), params)


def _insert_values(
    plan: _Plan, conn: Any, cursor: Any, rows: Sequence[Row], notify: Sequence[str]
) -> None:
    """Insert ``rows`` by multi-row ``VALUES`` statements (a single row on PostgreSQL,
    any number elsewhere), the wake-ups riding the first; only the wake-ups when there
    is no row."""
    limit = rows_per_statement(conn.alias, rows[0]) if len(rows) > 1 else MAX_ROWS
    start = 0
    while start < len(rows) or notify:
        statement = dbclock.statement_number()
        params: list[Any] = []
        values: list[str] = []
        size = 0
        while start < len(rows) and len(values) < limit and size < MAX_STATEMENT_BYTES:
            values.append(plan.row(rows[start], statement, params, conn))
            if plan.vendor == "mysql":  # max_allowed_packet bounds a statement
                size += _mysql_row_bytes(rows[start].spec)
            start += 1
        if not values:  # nothing left to insert, only the wake-ups
            cursor.execute(
                "SELECT " + ", ".join(["pg_notify(%s, %s)"] * len(notify)),
                [p for q in notify for p in (CHANNEL, q)],
            )
            break
        sql = _with_notify(plan.head + "VALUES " + ", ".join(values), params, notify)
        notify = []
        cursor.execute(sql, params)


def _mysql_row_bytes(spec: Any) -> int:
    """An upper bound of the bytes ``spec``'s row adds to a MySQL statement.

    The payload goes as its JSON text (ASCII: ``json.dumps`` escapes every other
    character, ``é`` as six bytes), in a string literal that the driver escapes
    (a backslash or a quote doubles), so at most twice the text; 512 bytes cover
    the other columns (an id or a unique key adds its own length).
    """
    text = spec.payload_json if spec.payload_json is not None else json.dumps(spec.payload)
    keys = len(spec.job_id or "") + len(spec.unique_key or "")
    return 2 * len(text) + 4 * keys + 512


def _column_values(plan: _Plan, rows: Sequence[Row], conn: Any) -> dict[str, list[Any]]:
    """PostgreSQL's many-row insert: each variable column's values, one per row, as
    the one-row insert binds them (``run_delay``, ``expires_in`` and ``unique_in``
    are intervals that the statement adds to its clock), but the payloads as JSON
    texts."""
    for row in rows:
        if row.hold_fields:
            _check_hold_fields(row)
    specs = [row.spec for row in rows]
    run_at = plan.by_name["run_at"]

    def millis(ms: int | None) -> timedelta | None:
        return None if ms is None else timedelta(milliseconds=ms)

    return {
        "jid": [row.jid for row in rows],
        "queue": [spec.queue for spec in specs],
        "job_type": [spec.job_type for spec in specs],
        "job_id": [spec.job_id for spec in specs],
        "job_id_hash": [None if spec.job_id is None else hold_hash(spec.job_id) for spec in specs],
        # JSON texts, as checked at validation (json.dumps where a spec has none).
        "payload": [
            spec.payload_json if spec.payload_json is not None else json.dumps(spec.payload)
            for spec in specs
        ],
        "priority": [spec.priority for spec in specs],
        "max_retry": [spec.max_retry for spec in specs],
        "timeout_ms": [spec.timeout_ms for spec in specs],
        "secure": [spec.secure for spec in specs],
        # run_at: the given instant, else the statement's clock plus the delay.
        "run_at": [
            None if spec.at is None else run_at.get_db_prep_save(spec.at, conn) for spec in specs
        ],
        "run_delay": [spec.delay if spec.at is None else None for spec in specs],
        "expires_in": [millis(spec.expires_ms) for spec in specs],
        "unique_key": [spec.unique_key for spec in specs],
        "unique_key_hash": [
            None if spec.unique_key is None else hold_hash(spec.unique_key) for spec in specs
        ],
        "unique_mode": [spec.unique_mode if spec.unique_key is not None else "" for spec in specs],
        "unique_in": [
            None if spec.unique_key is None else millis(spec.unique_ttl_ms) for spec in specs
        ],
        "dedupe_ms": [row.hold_fields.get("dedupe_ms") for row in rows],
        "keep_ms": [row.hold_fields.get("keep_ms") for row in rows],
        "origin": [spec.origin for spec in specs],
        "limit_key": [spec.limit_key for spec in specs],
    }


def _insert_columns(
    plan: _Plan, conn: Any, cursor: Any, rows: Sequence[Row], notify: Sequence[str]
) -> None:
    """PostgreSQL: insert ``rows`` in one statement that binds one array per column.

    ``INSERT ... SELECT ... FROM unnest(%s::type[], ...) WITH ORDINALITY``, in the
    rows' order: the statement's text does not grow with the rows, so it is
    prepared once per shape, and the client parses and binds a few dozen
    parameters, not 16 per row (a multi-row VALUES of 1,000 jobs spent more time in
    psycopg's query parsing than in the server). A column whose value is the same
    in every row (the queue, the job type, the priority of a batch of one type, the
    NULL id of a batch without ids) binds that value once instead of an array:
    psycopg dumps arrays element by element in Python, and for a typical batch that
    leaves two arrays (the jids and the payloads) of about twenty. Each row is the
    one-row insert's, column for column; the times are the statement's clock.
    """
    values = _column_values(plan, rows, conn)
    by_name = plan.by_name
    casts = {
        "run_delay": "interval",
        "expires_in": "interval",
        "unique_in": "interval",
    }

    def cast(name: str) -> str:
        return casts.get(name) or str(by_name[name].cast_db_type(conn))

    # The jids are unique: there is always that array to walk.
    arrays = [name for name in values if name == "jid" or not _uniform(values[name])]
    params: list[Any] = []

    def ref(name: str) -> str:
        if name in arrays:
            return "NULLIF(u.payload, 'null'::jsonb)" if name == "payload" else f"u.{name}"
        value = values[name][0]
        if name == "payload":  # SQL NULL for None, as Django's JSONField stores it
            value = None if value == "null" else value
        params.append(value)
        return f"%s::{cast(name)}"

    now = plan.now
    select: list[str] = []
    for f in plan.fields:
        name = f.attname
        if name not in _VARIABLE:
            select.append(plan.constant(name, params))
        elif name in ("created_at", "updated_at"):
            select.append(now)
        elif name == "run_at":
            select.append(f"COALESCE({ref('run_at')}, {now} + {ref('run_delay')})")
        elif name == "expires_at":
            select.append(f"{now} + {ref('expires_in')}")
        elif name == "unique_expires_at":
            select.append(f"{now} + {ref('unique_in')}")
        else:
            select.append(ref(name))
    # Built by joins in C rather than by psycopg's element-by-element array dumping:
    # the jids (hex digits, no separator to escape) as one string, and the payloads
    # as one JSON array of their checked texts.
    sources = []
    for name in arrays:
        if name == "jid":
            sources.append("unnest(string_to_array(%s::text, ','))")
            params.append(",".join(values[name]))
        elif name == "payload":
            sources.append("jsonb_array_elements(%s::jsonb)")
            params.append("[" + ",".join(values[name]) + "]")
        else:
            sources.append(f"unnest(%s::{cast(name)}[])")
            params.append(values[name])
    sql = (
        f"{plan.head}SELECT {', '.join(select)} FROM ROWS FROM ({', '.join(sources)}) "  # noqa: S608
        f"WITH ORDINALITY AS u({', '.join(arrays)}, n) ORDER BY u.n"
    )
    cursor.execute(_with_notify(sql, params, notify), params)


def _uniform(column: list[Any]) -> bool:
    """Whether every value of ``column`` equals its first (payloads: their JSON texts).

    Datetimes also by their UTC offset: the two readings of a wall time a DST change
    repeats (``fold``) compare equal in the same zone, yet are an hour apart.
    """
    first = column[0]
    if column.count(first) != len(column):
        return False
    if isinstance(first, datetime):
        offset = first.utcoffset()
        return all(value.utcoffset() == offset for value in column)
    return True


def _with_notify(sql: str, params: list[Any], notify: Sequence[str]) -> str:
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
