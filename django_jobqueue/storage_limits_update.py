# ruff: noqa: S608 (every interpolated piece is a quoted identifier or %s placeholders)
"""The statements that move a limited claim's accepted jobs to ``processing``
(docs/limits.md "How a claim enforces the limits"), beside those of
:mod:`django_jobqueue.storage_limits_sql` that lock, count and read the candidates."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import connections

from . import storage_sql
from .models import Job, JobStatus, LimitState
from .storage_limits_sql import RUNNING, Pair, Target, key_sql
from .store import jobrows, unique
from .store.flights import Sql

__all__ = ["keyed_claim_statement", "update_statements"]


def _in(values: Sequence[Any]) -> str:
    return ", ".join(["%s"] * len(values))


def keyed_claim_statement(
    using: str,
    target: Target,
    claim: dict[str, Any],
    *,
    ids: Sequence[int] | None = None,
    keys: Sequence[str] | None = None,
    due: tuple[str, Sequence[Any]] | None = None,
) -> Sql:
    """The statement that moves to ``processing`` those candidates that ``target``'s
    limit admits, at most ``claim["limit"]`` of them in claim order: a job not under
    ``target``, or one of a key's first ``concurrency - in flight`` jobs, the keys'
    jobs in flight counted by the statement itself.

    The candidates are either ``ids`` (PostgreSQL: locked by this transaction's
    earlier flight, after which their ``keys``' rows were locked, and only those keys
    are counted), or ``due``: SQL and parameters of a ``FROM`` item of whole job rows,
    the claim's due candidates (SQLite, whose write transaction is the lock: every key
    in flight is counted). Its rows are the claimed jobs' columns
    (:func:`~django_jobqueue.storage_sql.claimed`); ``claim`` as
    :func:`~django_jobqueue.storage_sql.claim_statement` takes it.
    """
    conn = connections[using]
    table = conn.ops.quote_name(Job._meta.db_table)
    key, key_params = key_sql(using, target.limit)
    col = target.column
    if ids is not None:
        source, source_params = f"{table} WHERE id = ANY(%s)", [list(ids)]
    else:
        assert due is not None  # noqa: S101 (one of the two, by the signature's contract)
        source, source_params = due[0], list(due[1])
    counted, counted_params = "", []
    if keys is not None:
        counted, counted_params = f" AND {key} = ANY(%s)", [*key_params, list(keys)]
    admitted = (
        f"SELECT c.id FROM (SELECT id, priority, run_at, {key} AS k, {col} = %s AS limited, "
        f"ROW_NUMBER() OVER (PARTITION BY {col} = %s, {key} ORDER BY priority, run_at, id) "
        f"AS r FROM {source}) AS c LEFT JOIN (SELECT {key} AS k, COUNT(*) AS n FROM {table} "
        f"WHERE {RUNNING} AND {col} = %s{counted} GROUP BY 1) AS f ON f.k = c.k "
        "WHERE NOT c.limited OR c.r <= %s - COALESCE(f.n, 0) "
        "ORDER BY c.priority, c.run_at, c.id LIMIT %s"
    )
    params = [*key_params, target.value, target.value, *key_params, *source_params]
    params += [*key_params, target.value, *counted_params]
    params += [target.limit.concurrency or 0, claim["limit"]]
    update, update_params = _update_sql(
        using, claim["owner"], claim["token"], claim["lease"], claim["started"]
    )
    return Sql(
        f"{update} WHERE id IN ({admitted}) AND waiting = %s "
        f"RETURNING {jobrows.job_columns(using)}",
        [*update_params, *params, True],
        prepare=True,
    )


def update_statements(
    using: str,
    ids: Sequence[int],
    owner: str,
    token: str,
    lease: timedelta,
    started: bool,
    levels: dict[Pair, float],
    now: datetime | None,
) -> list[Sql]:
    """The statements that store the buckets' ``levels`` (at ``now``) and move the
    accepted ``ids`` (locked by this transaction) to ``processing``; the last one's
    rows are the claimed jobs' columns (:func:`~django_jobqueue.storage_sql.claimed`)."""
    conn = connections[using]
    vendor = conn.vendor
    table = conn.ops.quote_name(Job._meta.db_table)
    states = conn.ops.quote_name(LimitState._meta.db_table)
    statements: list[Sql] = []
    if levels and now is not None:
        stored = conn.ops.adapt_datetimefield_value(now)
        for (target, key), level in levels.items():
            statements.append(
                Sql(
                    f"UPDATE {states} SET tokens = %s, refilled_at = %s "
                    "WHERE target = %s AND limit_key = %s",
                    [level, stored, target, key],
                )
            )
    if not ids:
        return statements
    update, params = _update_sql(using, owner, token, lease, started)
    sql = f"{update} WHERE id IN ({_in(ids)}) AND waiting = %s"
    params = [*params, *ids, True]
    columns = jobrows.job_columns(using)
    if vendor == "mysql":
        statements.append(Sql(sql, params))
        statements.append(Sql(f"SELECT {columns} FROM {table} WHERE id IN ({_in(ids)})", ids))
    else:
        statements.append(Sql(f"{sql} RETURNING {columns}", params))
    return statements


def _update_sql(
    using: str, owner: str, token: str, lease: timedelta, started: bool
) -> tuple[str, list[Any]]:
    """The ``UPDATE ... SET`` of a claim (no ``WHERE``) and its parameters."""
    conn = connections[using]
    vendor = conn.vendor
    table = conn.ops.quote_name(Job._meta.db_table)
    now_params: list[Any] = []
    lease_params: list[Any]
    if vendor == "postgresql":
        now_sql = "STATEMENT_TIMESTAMP()"
        lease_sql, lease_params = f"{now_sql} + %s", [lease]
    elif vendor == "mysql":
        now_sql = "CURRENT_TIMESTAMP(6)"
        lease_sql = f"{now_sql} + INTERVAL %s MICROSECOND"
        lease_params = [lease // timedelta(microseconds=1)]
    else:
        stamp = storage_sql._sqlite_now(using)
        now_sql, lease_sql, now_params = "%s", "%s", [stamp]
        lease_params = [storage_sql._sqlite_now(using, lease)]
    started_sql = now_sql if started else "NULL"
    set_params: list[Any] = [JobStatus.PROCESSING, False, owner, token, *lease_params]
    set_params += now_params  # heartbeat_at
    if started:
        set_params += now_params
    set_params += now_params  # updated_at
    sql = (
        f"UPDATE {table} SET status = %s, waiting = %s, attempt = attempt + 1, "
        f"lease_owner = %s, lease_token = %s, lease_expires_at = {lease_sql}, "
        f"heartbeat_at = {now_sql}, started_at = {started_sql}, updated_at = {now_sql}, "
        "unique_key_hash = CASE WHEN unique_mode = %s THEN NULL ELSE unique_key_hash END"
    )
    return sql, [*set_params, unique.UNTIL_EXECUTING]
