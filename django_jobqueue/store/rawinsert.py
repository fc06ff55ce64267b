"""The insert of jobs as raw SQL: one statement per job or per chunk, no ORM compilation.

:class:`~django_jobqueue.store.managers.JobManager` writes every job through here. The
statement goes through Django's own connection (on PostgreSQL a cursor that
prepares it: :mod:`django_jobqueue.core.prepared`), so it joins the caller's
transaction, shows in ``CaptureQueriesContext`` and passes Django's execute
wrappers; what does not change between calls (the column list, the SQL of a
row of each shape, the prepared defaults) is its plan, made once per alias and
vendor (:mod:`django_jobqueue.store.insertplan`, which also says how the row is the
ORM's, column for column).

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
import time
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction

from ..core import dbclock, prepared
from ..core.conf import get_config
from ..core.validation import hold_hash
from .insertplan import (
    VARIABLE,
    Plan,
    Row,
    check_hold_fields,
    connection_of,
    insert_plan,
    with_notify,
)
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

#: Byte maps that set a UUID's version (7) and variant (RFC 9562) bits, applied to
#: every jid of a batch at once by ``bytes.translate``.
_VERSION_7 = bytes(b & 0x0F | 0x70 for b in range(256))
_VARIANT = bytes(b & 0x3F | 0x80 for b in range(256))


def new_jids(count: int) -> list[str]:
    """Return ``count`` new jids: version-7 UUIDs (RFC 9562) as 32 hex digits.

    The first 48 bits are the Unix time in ms (one read for the lot), the other 74
    free bits random (one read of the system's random source for the lot). Made in
    time order, a job's entry in the ``jid`` index lands beside the last ones, not
    on a random page of it: on a table of a million jobs, after a checkpoint, an
    enqueue wrote 0.9 KB of WAL against 6 KB for a random jid, whose page PostgreSQL
    logs whole the first time it changes; the claim's and the outcome's new row
    versions add their ``jid`` entries in the same order. 74 random bits keep a jid
    unguessable.
    """
    stamp = (time.time_ns() // 1_000_000).to_bytes(6, "big")
    raw = bytearray(os.urandom(16 * count))
    if count == 1:  # a single enqueue's: the same bits, without the slices
        raw[:6] = stamp
        raw[6] = raw[6] & 0x0F | 0x70
        raw[8] = raw[8] & 0x3F | 0x80
        return [raw.hex()]
    for start in range(6):
        raw[start::16] = bytes([stamp[start]]) * count
    raw[6::16] = raw[6::16].translate(_VERSION_7)
    raw[8::16] = raw[8::16].translate(_VARIANT)
    text = raw.hex()
    return [text[i : i + 32] for i in range(0, 32 * count, 32)]


def wakes_by_notify(using: str, conn: Any = None) -> bool:
    """Whether a due job's insert on ``using`` carries a ``pg_notify``; ``conn``: its
    connection, when the caller has it."""
    return connection_of(using, conn).vendor == "postgresql" and get_config().NOTIFY


def wake_local(using: str, conn: Any = None) -> None:
    """Set :data:`~django_jobqueue.store.wakeups.local_event` once ``using``'s transaction
    commits; ``conn``: its connection, when the caller has it."""
    if connection_of(using, conn).in_atomic_block:
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
    conn = connection_of(using, conn)
    plan = insert_plan(using, conn)
    notify = queues if wakes_by_notify(using, conn) else []
    with prepared.cursor(conn) as cursor:
        if len(rows) == 1:
            _insert_one(plan, conn, cursor, rows[0], notify)
        elif plan.vendor == "postgresql" and rows:
            for start in range(0, len(rows), MAX_ROWS):
                _insert_columns(plan, conn, cursor, rows[start : start + MAX_ROWS], notify)
                notify = []  # the first statement carries the wake-ups
        else:
            _insert_values(plan, conn, cursor, rows, notify)
    if queues:
        wake_local(using, conn)


def _insert_one(plan: Plan, conn: Any, cursor: Any, row: Row, notify: Sequence[str]) -> None:
    """Insert ``row`` by its shape's one-row statement, the wake-ups riding it: the
    statement a multi-row insert of it would send, its text made once per shape and
    count of wake-ups."""
    shape = plan.shape(row)
    params = shape.fetch(row, dbclock.statement_number(), conn)
    for queue in notify:
        params += (CHANNEL, queue)
    cursor.execute(shape.statement(len(notify)), params)


def _insert_values(
    plan: Plan, conn: Any, cursor: Any, rows: Sequence[Row], notify: Sequence[str]
) -> None:
    """Insert ``rows`` by multi-row ``VALUES`` statements (MySQL and SQLite; a single
    row anywhere goes by :func:`_insert_one`), the wake-ups riding the first; only the
    wake-ups when there is no row."""
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
        sql = with_notify(plan.head + "VALUES " + ", ".join(values), params, notify)
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


def _column_values(plan: Plan, rows: Sequence[Row], conn: Any) -> dict[str, list[Any]]:
    """PostgreSQL's many-row insert: each variable column's values, one per row, as
    the one-row insert binds them (``run_delay``, ``expires_in`` and ``unique_in``
    are intervals that the statement adds to its clock), but the payloads as JSON
    texts."""
    for row in rows:
        if row.hold_fields:
            check_hold_fields(row)
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
    plan: Plan, conn: Any, cursor: Any, rows: Sequence[Row], notify: Sequence[str]
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
        if name not in VARIABLE:
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
    cursor.execute(with_notify(sql, params, notify), params)


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
