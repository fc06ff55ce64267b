"""Job instances from the rows of raw statements (docs/design.md#claim-plan).

The claim and the limits' claim read whole job rows back (``RETURNING`` every column,
or a ``SELECT`` of them on MariaDB). :func:`job_columns` is that column list, in the
model's field order; :func:`jobs_of_rows` turns such rows into :class:`Job` instances
as a query would: each column through the converters Django applies to it
(``SQLCompiler.get_converters``), and ``Model.__init__`` left out unless ``pre_init`` or
``post_init`` receivers exist (it was a twelfth of a no-op job's CPU).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models import JSONField
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from ..models import Job

__all__ = ["job_columns", "jobs_of_rows"]


@functools.cache
def _fields() -> list[Any]:
    return list(Job._meta.concrete_fields)


@functools.cache
def job_columns(using: str) -> str:
    """The job table's columns, quoted for ``using``'s database, comma-separated, in
    the order :func:`jobs_of_rows` reads them."""
    quote = connections[using].ops.quote_name
    return ", ".join(quote(field.column) for field in _fields())


def _converters(using: str) -> list[tuple[int, list[Any], Any]]:
    # What SQLCompiler.get_converters does for a model's own columns; cached on the
    # connection wrapper (converters are per backend, and so per alias).
    conn = connections[using]
    cached = getattr(conn, "_jq_job_converters", None)
    if cached is None:
        table = Job._meta.db_table
        cached = []
        for i, field in enumerate(_fields()):
            col = field.get_col(table)
            convs = conn.ops.get_db_converters(col) + field.get_db_converters(conn)
            if isinstance(field, JSONField) and field.decoder is None:
                convs = [_empty_json_first(conv) for conv in convs]
            if convs:
                cached.append((i, convs, col))
        conn._jq_job_converters = cached  # type: ignore[attr-defined]
    return cached


def _empty_json_first(convert: Any) -> Any:
    """``convert`` (a JSON column's converter), with the texts ``[]`` and ``{}`` (a new
    job's ``errors``) answered at once as a new empty list or dict: ``json.loads``
    goes through the decoder's Python ``decode``, 8% of a claimed no-op job's GIL
    time for the one ``[]`` of its row."""

    def converted(value: Any, expression: Any, connection: Any) -> Any:
        if value == "[]":
            return []
        if value == "{}":
            return {}
        return convert(value, expression, connection)

    return converted


def jobs_of_rows(using: str, rows: Sequence[Sequence[Any]]) -> list[Job]:
    """``rows`` (each the values of :func:`job_columns`, as the database driver of
    ``using`` returned them) as :class:`Job` instances of ``using``, in their order."""
    names = [field.attname for field in _fields()]
    converters = _converters(using)
    conn = connections[using]
    plain = not (pre_init.has_listeners(Job) or post_init.has_listeners(Job))
    jobs = []
    for row in rows:
        values = list(row)
        for i, convs, col in converters:
            value = values[i]
            if value is not None:  # NULL stays None: no converter of Job maps it
                for conv in convs:
                    value = conv(value, col, conn)
                values[i] = value
        if not plain:
            jobs.append(Job.from_db(using, names, values))
            continue
        jobs.append(job := Job.__new__(Job))
        job.__dict__.update(zip(names, values, strict=True), _state=ModelState())
        job._state.adding, job._state.db = False, using
    return jobs
