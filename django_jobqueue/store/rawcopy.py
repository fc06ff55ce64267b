"""PostgreSQL's bulk insert by ``COPY ... FROM STDIN``: the rows of a large batch as one stream.

:func:`copy_rows` writes the same rows as :func:`~django_jobqueue.store.rawinsert.insert_rows`
(column for column the ORM's ``Model.save(force_insert=True)``), through psycopg 3's
``cursor.copy()`` instead of an ``INSERT ... SELECT FROM unnest(...)``. The server
parses a tab-separated line per row, without an executor per statement or arrays to
unpack, and the client builds those lines by joins in C: a column whose value is the
same in every row of the batch is rendered once. :func:`uses_copy` says which of the
two a batch takes, by its size (docs/design.md#bulk-copy): as measured here, the
unnest insert for every size.

What a ``COPY`` cannot do, and what takes its place:

- It has no ``RETURNING``, and needs none: a job's jid is made by the client
  (:func:`~django_jobqueue.store.rawinsert.new_jids`) before the row is written, and
  the primary key is the column's sequence default, as in every insert of a job
  (no caller reads it).
- Its values are data, not expressions, so it cannot read the clock per row: the
  statement before it reads ``STATEMENT_TIMESTAMP()`` once, and every time of the
  batch is that instant (``created_at``, ``updated_at``, and ``run_at``,
  ``expires_at``, ``unique_expires_at`` as that instant plus their durations), as
  the unnest insert uses its own statement's clock for all of its rows.
- It cannot carry a ``pg_notify``: the wake-ups ride that clock statement. PostgreSQL
  delivers a notification only when its transaction commits, and drops it when the
  transaction or savepoint it was sent in rolls back, so they are sent if and only if
  the rows are committed, as when they ride the insert.
- A row that breaks a unique index (an id or a unique key that a creator the locks
  let through holds) fails the whole ``COPY`` with ``IntegrityError``, which is what
  the unnest insert raises for it: the caller's savepoint rolls back and
  :mod:`django_jobqueue.bulk` makes the batch again, as it does today.

Nothing outlives the transaction: no temporary table, no prepared statement, no
session setting. The two statements always run in one transaction (the caller's,
else one of their own), so a transaction pooler (PgBouncer's ``pool_mode =
transaction``) sends both to the same server session.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any

from django.db import connections, transaction
from django.db.models import NOT_PROVIDED

from ..core.validation import hold_hash
from .rawinsert import Row, insert_plan, wake_local, wakes_by_notify
from .wakeups import CHANNEL

__all__ = ["COPY_MIN_ROWS", "copy_rows", "uses_copy"]

#: The smallest batch that :func:`uses_copy` sends by ``COPY`` on PostgreSQL; None:
#: none, every batch takes the unnest insert. Measured by ``bench/bulk_copy.py``
#: (batches of 10 to 20,000 jobs, both ways, interleaved in one run, and the CPU time
#: per job of the client and its server process): the COPY costs more below 1,000
#: jobs (its extra statement) and the same from 1,000 on, within a few per cent either
#: way, while its wall-clock rate came out below the unnest insert's in most rounds.
#: Both pay the same for what dominates, the row's dozen index entries (about 15 of
#: the 18 µs of server CPU per job), which no way of sending the rows changes; so the
#: unnest insert, one prepared statement, stays the path of every size
#: (docs/design.md#bulk-copy). Set a number here to take the COPY from that size on.
COPY_MIN_ROWS: int | None = None
#: Rows per ``write()`` to the COPY stream: bounds the text held at once (a few MB).
_ROWS_PER_WRITE = 2000
_NULL = "\\N"


def uses_copy(using: str, count: int) -> bool:
    """Whether a batch of ``count`` rows on alias ``using`` goes in by :func:`copy_rows`.

    PostgreSQL with psycopg 3 only, from :data:`COPY_MIN_ROWS` rows on (None, the
    measured choice: never); every other batch takes
    :func:`~django_jobqueue.store.rawinsert.insert_rows`.
    """
    if COPY_MIN_ROWS is None or count < COPY_MIN_ROWS:
        return False
    if connections[using].vendor != "postgresql":
        return False
    # Django's PostgreSQL backend runs on psycopg 3 when it is importable, else on
    # psycopg2, whose cursors have no copy().
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    return is_psycopg3


def copy_rows(using: str, rows: Sequence[Row], *, wake_queues: Iterable[str] = ()) -> None:
    """PostgreSQL: insert ``rows`` by one ``COPY ... FROM STDIN``, in their order.

    Parameters
    ----------
    using:
        Database alias of the jobs (PostgreSQL, psycopg 3). The clock statement and
        the COPY run in its current transaction, else in one of their own.
    rows:
        The jobs, as :func:`~django_jobqueue.store.rawinsert.insert_rows` takes them.
    wake_queues:
        Queues to wake once the transaction commits: one ``pg_notify`` per queue
        (when ``JOBQUEUE["NOTIFY"]``), and the in-process event from ``on_commit``.

    Raises
    ------
    IntegrityError
        If a row breaks a unique index; nothing of the batch stays.
    TypeError
        If a row carries a hold field other than ``dedupe_ms`` and ``keep_ms``.
    """
    queues = list(dict.fromkeys(wake_queues))
    if not rows:
        return
    for row in rows:
        if row.hold_fields:
            unknown = set(row.hold_fields) - {"dedupe_ms", "keep_ms"}
            if unknown:
                raise TypeError(
                    f"Unknown job fields {sorted(unknown)}; only ('dedupe_ms', 'keep_ms') "
                    "are stored."
                )
    conn = connections[using]
    plan = insert_plan(using, conn)
    notify = queues if wakes_by_notify(using, conn) else []
    with transaction.atomic(using=using, savepoint=False), conn.cursor() as cursor:
        params: list[str] = [p for q in notify for p in (CHANNEL, q)]
        cursor.execute(
            "SELECT " + ", ".join(["STATEMENT_TIMESTAMP()"] + ["pg_notify(%s, %s)"] * len(notify)),
            params,
        )
        now = cursor.fetchone()[0]
        columns = _column_texts(plan, rows, now)
        sql, names = _copy_statement(plan, conn, columns)
        lines = _lines(names, columns, len(rows))
        # Django's cursor has no copy(): psycopg's, with Django's error translation
        # (a unique violation is an IntegrityError, as from execute()).
        started = time.monotonic()
        with conn.wrap_database_errors, cursor.cursor.copy(sql) as copy:
            for chunk in iter(lambda: list(itertools.islice(lines, _ROWS_PER_WRITE)), []):
                copy.write("\n".join(chunk) + "\n")
        if conn.queries_logged:  # DEBUG or CaptureQueriesContext: show it as a statement
            took = f"{time.monotonic() - started:.3f}"
            conn.queries_log.append({"sql": f"{sql} -- {len(rows)} rows", "time": took})
    if queues:
        wake_local(using, conn)


def _copy_statement(plan: Any, conn: Any, columns: dict[str, Any]) -> tuple[str, list[str]]:
    """The ``COPY`` of ``columns`` (attname: text, see :func:`_column_texts`) into
    ``plan``'s table on ``conn``, and the attnames it lists, in order.

    A nullable column without a database default that is NULL in every row is left
    out (it is NULL by the omission): fewer fields for the server to parse per row.
    """
    quote = conn.ops.quote_name
    names = [
        str(f.attname)
        for f in plan.fields
        if not (columns[f.attname] == _NULL and f.null and f.db_default is NOT_PROVIDED)
    ]
    listed = ", ".join(quote(str(plan.by_name[name].column)) for name in names)
    return f"COPY {plan.table} ({listed}) FROM STDIN", names


def _escape(text: str) -> str:
    """``text`` as a field of COPY's text format: backslash, newline, CR and tab escaped."""
    if "\\" in text or "\n" in text or "\r" in text or "\t" in text:
        return (
            text.replace("\\", "\\\\")
            .replace("\n", "\\n")
            .replace("\r", "\\r")
            .replace("\t", "\\t")
        )
    return text


def _field_text(field: Any, value: Any) -> str:
    """``value`` of ``field`` (a Job model field) as a COPY text field: what PostgreSQL
    reads back as the value the ORM stores."""
    if value is None:
        return _NULL
    kind = field.get_internal_type()
    if kind == "JSONField":
        return _escape(json.dumps(value, cls=field.encoder))
    if kind == "BooleanField":
        return "t" if value else "f"
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    if isinstance(value, bool | int):
        return str(int(value))
    return _escape(str(value))


def _lines(names: list[str], columns: dict[str, Any], count: int) -> Iterator[str]:
    """The COPY text of ``count`` rows of ``columns`` (listed in the order of ``names``),
    one line each (without its newline), in order."""
    # Runs of columns that hold one value in every row are joined once.
    parts: list[Any] = []
    for name in names:
        value = columns[name]
        if isinstance(value, str) and parts and isinstance(parts[-1], str):
            parts[-1] += "\t" + value
        else:
            parts.append(value)
    sources = [itertools.repeat(part, count) if isinstance(part, str) else part for part in parts]
    return map("\t".join, zip(*sources, strict=False))


def _column_texts(plan: Any, rows: Sequence[Row], now: datetime) -> dict[str, Any]:
    """Each column's COPY text: one str when every row has the same, else a list."""
    by_name = plan.by_name
    specs = [row.spec for row in rows]
    out: dict[str, Any] = {}
    for name, field in by_name.items():
        if name not in _PER_ROW:
            out[name] = _field_text(field, field.get_default())
    stamp = now.isoformat(sep=" ")
    out["created_at"] = out["updated_at"] = stamp

    def column(name: str, values: list[Any]) -> Any:
        first = values[0]
        field = by_name[name]
        if values.count(first) == len(values):
            return _field_text(field, first)
        return [_field_text(field, value) for value in values]

    out["jid"] = [row.jid for row in rows]
    for name in (
        "queue", "job_type", "job_id", "priority", "max_retry", "timeout_ms", "secure",
        "unique_key", "origin",
    ):  # fmt: skip
        out[name] = column(name, list(map(attrgetter(name), specs)))
    hashed = {"job_id_hash": "job_id", "unique_key_hash": "unique_key"}
    for name, source in hashed.items():
        text = out[source]
        if isinstance(text, str):  # one value (None: no hold) for every row
            out[name] = _NULL if text == _NULL else hold_hash(getattr(specs[0], source))
        else:
            values = list(map(attrgetter(source), specs))
            out[name] = [_NULL if v is None else hold_hash(v) for v in values]
    out["unique_mode"] = column(
        "unique_mode", [s.unique_mode if s.unique_key is not None else "" for s in specs]
    )
    # The payloads: the JSON texts validation checked (SQL NULL for None, as the field
    # stores it); json.dumps where a spec was built without validation.
    payloads = [
        _NULL
        if s.payload is None
        else _escape(s.payload_json if s.payload_json is not None else json.dumps(s.payload))
        for s in specs
    ]
    out["payload"] = payloads[0] if payloads.count(payloads[0]) == len(payloads) else payloads
    # Times: the clock's instant plus a duration (or the given instant), each distinct
    # value rendered once. Keys tell apart the two readings of a wall time a DST change
    # repeats (equal datetimes an hour apart) by their UTC offset.
    texts: dict[Any, str] = {}
    run_at = []
    for s in specs:
        key = s.delay if s.at is None else (s.at, s.at.utcoffset())
        text = texts.get(key)
        if text is None:
            instant = now + s.delay if s.at is None else s.at
            text = texts[key] = instant.isoformat(sep=" ")
        run_at.append(text)
    out["run_at"] = _uniform_or_list(run_at)
    out["expires_at"] = _after(now, [s.expires_ms for s in specs])
    out["unique_expires_at"] = _after(
        now, [s.unique_ttl_ms if s.unique_key is not None else None for s in specs]
    )
    for name in ("dedupe_ms", "keep_ms"):
        if any(row.hold_fields for row in rows):
            out[name] = column(name, [row.hold_fields.get(name) for row in rows])
        else:
            out[name] = _NULL
    return out


def _after(now: datetime, durations_ms: list[int | None]) -> Any:
    """A time column of ``now`` plus each of ``durations_ms`` (None: SQL NULL)."""
    texts: dict[int | None, str] = {None: _NULL}
    out = []
    for ms in durations_ms:
        text = texts.get(ms)
        if text is None:
            assert ms is not None  # noqa: S101 - None is in texts from the start
            text = texts[ms] = (now + timedelta(milliseconds=ms)).isoformat(sep=" ")
        out.append(text)
    return _uniform_or_list(out)


def _uniform_or_list(texts: list[str]) -> Any:
    """``texts``' one value when they are all the same, else ``texts``."""
    return texts[0] if texts.count(texts[0]) == len(texts) else texts


#: The columns set per row (every other column takes its field's default).
_PER_ROW = frozenset(
    {
        "jid", "queue", "job_type", "job_id", "job_id_hash", "payload", "priority",
        "max_retry", "timeout_ms", "secure", "run_at", "expires_at", "unique_key",
        "unique_key_hash", "unique_mode", "unique_expires_at", "dedupe_ms", "keep_ms",
        "created_at", "updated_at", "origin",
    }
)  # fmt: skip
