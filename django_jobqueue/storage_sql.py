# ruff: noqa: S608 (every interpolated piece is a quoted identifier or %s placeholders)
"""Raw SQL of the worker's two hot writes: the batched claim and the batched ``done``.

:mod:`django_jobqueue.storage` calls these; they exist because compiling the ORM's
queries took about a quarter of a worker's CPU per job. The statements
keep the ORM versions' guarantees exactly:

- **Claim.** PostgreSQL: one ``UPDATE ... WHERE id = ANY(ARRAY(SELECT id ... ORDER BY
  priority, run_at, id LIMIT n FOR UPDATE SKIP LOCKED)) RETURNING`` (the inner
  select walks the claim index, the update the primary key). ``ARRAY(...)`` makes
  the locking select an init plan, run once: as ``id IN (SELECT ...)`` the planner
  may put it on the inner side of a nested-loop semi join and run it again for each
  outer row, and each run skips the rows this very statement has just updated and
  locks the next ``n``: one claim of ``LIMIT 17`` took all 5,000 due jobs once the
  table's statistics favoured that plan. SQLite 3.35+: ``UPDATE ... WHERE id IN (SELECT ... LIMIT n)
  RETURNING`` without row locks (one write statement is atomic there, and its
  ``IN`` list is built once). MariaDB/MySQL have no
  ``UPDATE ... RETURNING``: one ``SELECT <columns>, CURRENT_TIMESTAMP(6) ... FOR
  UPDATE SKIP LOCKED`` and one ``UPDATE ... WHERE id IN (...)`` in one transaction;
  the claimed rows are built from the locked rows and the selected clock, so no
  re-select is needed.
- **Done.** One ``UPDATE`` for many jobs, each row guarded by its own lease token
  (``lease_token = CASE id WHEN ... END``), ``processing`` and ``rerun = false``;
  PostgreSQL and SQLite return the stored ids, MariaDB locks and reads the owned
  ids first (``SELECT ... FOR UPDATE``) in the same transaction.

Times come from the database clock as :class:`~django_jobqueue.core.dbclock.Now` renders
it: ``STATEMENT_TIMESTAMP()`` on PostgreSQL, ``CURRENT_TIMESTAMP(6)`` on MySQL, and
on SQLite the value its ``django_jobqueue_now`` function answers (Django's own text
form of ``timezone.now()``), computed here once per statement.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Collection, Hashable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from django.db import connections, transaction
from django.utils import timezone

from .core import prepared
from .models import Job, JobStatus, QueuePause
from .store import claimfloor, unique
from .store.jobrows import job_columns, jobs_of_rows
from .store.pgarrays import bigint_array, nulls_or_list, text_array

__all__ = [
    "claim_rows",
    "claim_statement",
    "claimed",
    "order",
    "complete_rows",
    "lock_owned",
    "owned_where",
    "supported",
]

_FAST_VENDORS = ("postgresql", "mysql", "sqlite")


def supported(using: str) -> bool:
    """Return whether ``using`` takes the raw statements (else the ORM path is used)."""
    conn = connections[using]
    if conn.vendor == "mysql":
        return bool(conn.features.has_select_for_update_skip_locked)
    return conn.vendor in _FAST_VENDORS


def _q(using: str, name: str) -> str:
    return connections[using].ops.quote_name(name)


def _sqlite_now(using: str, plus: timedelta | None = None) -> str:
    now = timezone.now()
    return str(connections[using].ops.adapt_datetimefield_value(now + plus if plus else now))


def _in(values: Collection[Any]) -> str:
    return ", ".join(["%s"] * len(values))


def _due_filter(
    using: str,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    exclude_queues: Sequence[str],
) -> str:
    # Only placeholders and quoted names go into the text; the names are parameters
    # (queues, then paused queues, then job types). NOT IN a list is added only when
    # there is something to leave out, so the usual claim keeps its plain shape over
    # the claim index.
    #
    # The pause table is read by the claim statement itself (docs/design.md#execution):
    # a job committed after a pause was is never claimed by a statement that does not
    # see the pause, whatever the process's cache of pauses says. The subquery is not
    # correlated (a hashed subplan on PostgreSQL, materialised once on MariaDB), and a
    # locking read does not lock a subquery's rows, so claims never wait on it.
    sql = ""
    if queues:
        sql += f" AND queue IN ({_in(queues)})"
    if exclude_queues:
        sql += f" AND queue NOT IN ({_in(exclude_queues)})"
    paused = _q(using, QueuePause._meta.db_table)
    sql += f" AND queue NOT IN (SELECT queue FROM {paused})"
    if exclude_types:
        sql += f" AND job_type NOT IN ({_in(exclude_types)})"
    return sql


def order(rows: list[Job]) -> list[Job]:
    """``rows`` in claim order: priority, ``run_at``, id."""
    return sorted(rows, key=lambda job: (job.priority, job.run_at, job.pk))


def claim_rows(
    using: str,
    *,
    owner: str,
    token: str,
    limit: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    lease: timedelta,
    exclude_queues: Sequence[str] = (),
    started: bool = True,
) -> list[Job]:
    """Claim up to ``limit`` due jobs in claim order; see :func:`storage.claim`.

    ``token`` is the new lease token of every claimed row, ``lease`` its length;
    ``exclude_queues`` are queues not to claim from (the paused ones); ``started``
    False leaves ``started_at`` NULL (claimed, not started yet). Only for aliases
    where :func:`supported` is true.
    """
    vendor = connections[using].vendor
    filters = _due_filter(using, queues, exclude_types, exclude_queues)
    filter_params: list[Any] = [*(queues or ()), *exclude_queues, *exclude_types]
    if vendor == "mysql":
        return _claim_mysql(using, owner, token, limit, filters, filter_params, lease, started)
    start: claimfloor.Key | None = None
    filter_set = claimfloor.filter_set(using, queues, exclude_queues, exclude_types)
    due_filters, due_params = filters, filter_params
    if vendor == "postgresql":
        # While dead index entries slow the claim, it starts at its floor
        # (store/claimfloor.py): a bound the claim index positions its scan on.
        start = claimfloor.floors.start(filter_set)
        if start is not None:
            filters += " AND (priority, run_at, id) >= (%s, %s, %s)"
            filter_params = [*filter_params, *start]
    sql, params = _claim_statement(
        using, owner, token, limit, filters, filter_params, lease, started
    )  # fmt: skip
    began = time.perf_counter()
    with prepared.cursor(connections[using]) as cursor:  # the same text each claim
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    jobs = order(jobs_of_rows(using, rows))
    if vendor == "postgresql":
        first = (jobs[0].priority, jobs[0].run_at, jobs[0].pk) if jobs else None
        took_ms = (time.perf_counter() - began) * 1000
        # A short answer above the floor proves nothing below it: the caller sleeps
        # no longer than claimfloor.floors.recheck_ms says (store/claimfloor.py).
        claimfloor.floors.settle(
            filter_set, started=start, first=first, took_ms=took_ms, short=len(jobs) < limit
        )
        below = claimfloor.floors.due_look(filter_set)
        if below is not None:
            # The walk over the dead entries below the floor, off this claim's way. Its
            # rows are committed: a look that cannot be sent fails no claim.
            if not claimfloor.looker.submit(
                filter_set,
                functools.partial(_look_below, using, filter_set, due_filters, due_params, below),
            ):
                claimfloor.floors.abandon(filter_set)  # the next claim sends it again
    return jobs


def _look_below(
    using: str,
    filter_set: Hashable,
    filters: str,
    filter_params: list[Any],
    below: claimfloor.Key,
) -> None:
    """In the looker thread: find the first waiting due row that a claim with these
    filters would take below ``below`` (its floor's bound), and report it, or that
    there is none, and the look's time, to the floors (store/claimfloor.py).

    A read without locks: a row another claim has locked but not committed yet is
    found too, and the floor goes down to it for nothing but one claim's walk.
    """
    table = _q(using, Job._meta.db_table)
    sql = (
        f"SELECT priority, run_at, id FROM {table} "
        f"WHERE waiting = TRUE AND run_at <= STATEMENT_TIMESTAMP(){filters} "
        "AND (priority, run_at, id) < (%s, %s, %s) "
        "ORDER BY priority, run_at, id LIMIT 1"
    )
    began = time.perf_counter()
    try:
        with connections[using].cursor() as cursor:
            cursor.execute(sql, [*filter_params, *below])
            row = cursor.fetchone()
    except BaseException:
        claimfloor.floors.abandon(filter_set)  # the next claim sends another
        raise
    took_ms = (time.perf_counter() - began) * 1000
    found = (row[0], row[1], row[2]) if row is not None else None
    claimfloor.floors.looked(filter_set, below=below, found=found, took_ms=took_ms)


def claim_statement(
    using: str,
    *,
    owner: str,
    token: str,
    limit: int,
    queues: Sequence[str] | None,
    exclude_types: Collection[str],
    lease: timedelta,
    exclude_queues: Sequence[str] = (),
    started: bool = True,
    guard: tuple[str, Sequence[Any]] = ("", ()),
) -> tuple[str, list[Any]]:
    """Return the text and parameters of :func:`claim_rows`' one statement.

    PostgreSQL and SQLite only (MariaDB's claim is two statements), without the
    claim floor. ``guard`` is SQL ANDed to the due filter with its parameters
    (``" AND ..."``, uncorrelated: a subquery there runs once), so a caller can
    leave out jobs unless it holds (the limits' claim,
    :mod:`django_jobqueue.storage_limits`). Its rows become jobs by :func:`claimed`.
    """
    filters = _due_filter(using, queues, exclude_types, exclude_queues) + guard[0]
    filter_params: list[Any] = [*(queues or ()), *exclude_queues, *exclude_types, *guard[1]]
    return _claim_statement(using, owner, token, limit, filters, filter_params, lease, started)


def claimed(using: str, rows: Sequence[Sequence[Any]]) -> list[Job]:
    """The jobs of the rows a :func:`claim_statement` returned, in claim order."""
    return order(jobs_of_rows(using, rows))


def _claim_statement(
    using: str,
    owner: str,
    token: str,
    limit: int,
    filters: str,
    filter_params: list[Any],
    lease: timedelta,
    started: bool,
) -> tuple[str, list[Any]]:
    vendor = connections[using].vendor
    table = _q(using, Job._meta.db_table)
    release = "unique_key_hash = CASE WHEN unique_mode = %s THEN NULL ELSE unique_key_hash END"
    if vendor == "postgresql":
        now = "STATEMENT_TIMESTAMP()"
        set_params: list[Any] = [owner, token, lease]
        lease_sql = f"{now} + %s"
        # ARRAY(...): the locking select runs once (see the module's docstring). The
        # rows it locked are waiting (a row changed meanwhile fails its re-check and
        # is not locked), so the UPDATE finds them by primary key alone: with a
        # "waiting" test of its own the planner may scan every waiting row instead.
        guard, pick, picked = "", "= ANY(ARRAY(", " FOR UPDATE SKIP LOCKED))"
        guard_params: list[Any] = []
        now_params: list[Any] = []
    else:  # sqlite: one write statement at a time, no row locks
        stamp = _sqlite_now(using)
        now, lease_sql = "%s", "%s"
        set_params = [owner, token, _sqlite_now(using, lease), stamp]
        guard, pick, picked = "waiting = %s AND ", "IN (", ")"
        guard_params = [True]
        now_params = [stamp]
    started_sql = now if started else "NULL"
    if vendor == "sqlite":  # heartbeat_at (above), started_at, updated_at
        set_params += [stamp, stamp] if started else [stamp]
    times = f"heartbeat_at = {now}, started_at = {started_sql}, updated_at = {now}"
    # TRUE written out: PostgreSQL's claim indexes are partial (WHERE waiting), and a
    # prepared (generic) plan matches that only to a literal (docs/design.md#indexes).
    sql = (
        f"UPDATE {table} SET status = %s, waiting = %s, attempt = attempt + 1, "
        f"lease_owner = %s, lease_token = %s, lease_expires_at = {lease_sql}, {times}, "
        f"{release} WHERE {guard}id {pick}SELECT id FROM {table} "
        f"WHERE waiting = TRUE AND run_at <= {now}{filters} "
        f"ORDER BY priority, run_at, id LIMIT %s{picked} RETURNING {job_columns(using)}"
    )
    params = [
        JobStatus.PROCESSING,
        False,
        *set_params,
        unique.UNTIL_EXECUTING,
        *guard_params,
        *now_params,
        *filter_params,
        limit,
    ]
    return sql, params


@contextmanager
def _mysql_transaction(using: str) -> Iterator[None]:
    """A transaction on MySQL/MariaDB with one round trip fewer than ``atomic()``.

    Django's ``atomic()`` there switches the session's autocommit off and on again
    (``SET autocommit``, a round trip each) around the statements and the COMMIT:
    three round trips besides the statements, on the worker's claim and its batched
    ``done`` (a py-spy profile of a drain had 11% of its samples in them). Here it
    is two: ``START TRANSACTION`` and ``COMMIT``, which hold the same locks under
    the session's isolation level and leave autocommit as it was. Any error rolls
    the transaction back before it propagates (InnoDB rolls back only the statement
    on a lock wait timeout). Inside a caller's ``atomic`` (or with autocommit off)
    this is ``atomic()`` itself, a savepoint there.
    """
    conn = connections[using]
    if conn.in_atomic_block or not conn.get_autocommit():
        with transaction.atomic(using=using):
            yield
        return
    with conn.cursor() as cursor:  # through Django's cursor: seen as queries, errors wrapped
        cursor.execute("START TRANSACTION")
    try:
        yield
        with conn.cursor() as cursor:
            # Inside the try: a COMMIT that fails on a live session (interrupted,
            # an execute wrapper's error) must not leave the transaction open, or
            # the next autocommit statement joins it and the next START TRANSACTION
            # commits it behind the caller's back (atomic() rolls back there too).
            cursor.execute("COMMIT")
    except BaseException:
        try:
            with conn.cursor() as cursor:
                cursor.execute("ROLLBACK")
        except Exception:  # noqa: BLE001 (a dead session: the server rolled it back)
            conn.close()
        raise


def _claim_mysql(
    using: str,
    owner: str,
    token: str,
    limit: int,
    filters: str,
    filter_params: list[Any],
    lease: timedelta,
    started: bool,
) -> list[Job]:
    table = _q(using, Job._meta.db_table)
    select = (
        f"SELECT {job_columns(using)}, CURRENT_TIMESTAMP(6) FROM {table} "
        f"WHERE waiting = %s AND run_at <= CURRENT_TIMESTAMP(6){filters} "
        "ORDER BY priority, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
    )
    with _mysql_transaction(using), connections[using].cursor() as cursor:
        cursor.execute(select, [True, *filter_params, limit])
        rows = cursor.fetchall()
        if not rows:
            return []
        now: datetime = rows[0][-1]  # naive, the session's UTC (checks E1xx)
        ids = [row[0] for row in rows]
        cursor.execute(
            f"UPDATE {table} SET status = %s, waiting = %s, attempt = attempt + 1, "
            "lease_owner = %s, lease_token = %s, lease_expires_at = %s, heartbeat_at = %s, "
            "started_at = %s, updated_at = %s, unique_key_hash = CASE WHEN unique_mode = %s "
            f"THEN NULL ELSE unique_key_hash END WHERE id IN ({_in(ids)})",
            [
                JobStatus.PROCESSING,
                False,
                owner,
                token,
                now + lease,
                now,
                now if started else None,
                now,
                unique.UNTIL_EXECUTING,
                *ids,
            ],
        )
    jobs = jobs_of_rows(using, [row[:-1] for row in rows])
    aware = _jobs_time(using, now)
    for job in jobs:
        job.status = JobStatus.PROCESSING
        job.waiting = False
        job.attempt += 1
        job.lease_owner = owner
        job.lease_token = token
        job.lease_expires_at = _jobs_time(using, now + lease)
        job.heartbeat_at = job.updated_at = aware
        job.started_at = aware if started else None
        if job.unique_mode == unique.UNTIL_EXECUTING:
            job.unique_key_hash = None
    return order(jobs)


def _jobs_time(using: str, value: datetime) -> datetime:
    # The backend's own conversion of a datetime column (aware UTC with USE_TZ).
    conn = connections[using]
    convert = getattr(conn.ops, "convert_datetimefield_value", None)  # MySQL backend only
    return value if convert is None else convert(value, None, conn)


def complete_rows(
    using: str, items: Sequence[tuple[Job, Any, timedelta | None]], *, plain: bool = False
) -> set[int]:
    """Store ``done`` for each (job, result, dedupe) still owned; return the stored pks.

    ``plain``: the jobs have no batch, no workflow and no dependent by the copies
    the caller holds, and each row is written only while its ``awaited`` is still
    false (:mod:`django_jobqueue.flows.hooks`: a dependent enqueued meanwhile
    sends the job down the linked path).

    Each row is written only while it is ``processing`` under the job's own lease
    token and no rerun was asked (``storage.complete``'s first guarded update); a job
    missing from the answer was not written (lease lost, or a rerun to store). A
    ``dedupe`` holds the job's id that much longer, None frees it now; an
    ``until_executed`` unique key frees now. Results must be JSON (checked earlier).
    """
    conn = connections[using]
    vendor = conn.vendor
    if vendor == "postgresql":
        return _complete_rows_pg(using, items, plain=plain)
    table = _q(using, Job._meta.db_table)
    result_field = Job._meta.get_field("result")
    if vendor == "mysql":
        now, plus, then_json = "CURRENT_TIMESTAMP(6)", "{now} + INTERVAL %s MICROSECOND", "%s"
    else:  # sqlite (PostgreSQL went to _complete_rows_pg above)
        now, plus, then_json = "%s", "%s", "%s"
    stamp = _sqlite_now(using) if vendor == "sqlite" else None
    now_params = [stamp] if stamp is not None else []

    def interval(delta: timedelta) -> Any:
        if vendor == "mysql":
            return delta // timedelta(microseconds=1)
        if vendor == "sqlite":
            return _sqlite_now(using, delta)
        return delta

    params: list[Any] = [JobStatus.DONE]
    result_sql = " ".join(f"WHEN %s THEN {then_json}" for _ in items)
    for job, result, _dedupe in items:
        prepared = None if result is None else result_field.get_db_prep_save(result, conn)
        params += [job.pk, prepared]
    sets = [
        "status = %s",
        f"result = CASE id {result_sql} END",
        f"finished_at = {now}",
        f"updated_at = {now}",
        # A job started without a write of its own (storage.claim): the claim's time.
        "started_at = COALESCE(started_at, heartbeat_at)",
        "message = %s",
        "lease_token = %s",
        "lease_expires_at = NULL",
    ]
    # lease_owner stays: a finished job says which worker ran it (storage.LEASE_ENDED).
    params += [*now_params, *now_params, "", ""]
    held = [(job, dedupe) for job, _r, dedupe in items if dedupe]
    if held:
        whens = " ".join(f"WHEN %s THEN {plus.format(now=now)}" for _ in held)
        sets.append(f"id_held_until = CASE id {whens} ELSE id_held_until END")
        for job, dedupe in held:
            params += [job.pk, interval(dedupe)]
    freed = [job.pk for job, _r, dedupe in items if not dedupe]
    if freed:
        sets.append(f"job_id_hash = CASE WHEN id IN ({_in(freed)}) THEN NULL ELSE job_id_hash END")
        params += freed
    sets.append("unique_key_hash = CASE WHEN unique_mode = %s THEN NULL ELSE unique_key_hash END")
    params.append(unique.UNTIL_EXECUTED)
    where, guard_params = owned_where([job for job, _r, _d in items], plain=plain)
    if vendor == "mysql":
        with _mysql_transaction(using), conn.cursor() as cursor:
            owned = lock_owned(cursor, table, where, guard_params)
            if owned:
                cursor.execute(
                    f"UPDATE {table} FORCE INDEX (PRIMARY) SET {', '.join(sets)} {where}",
                    [*params, *guard_params],
                )
        return owned
    with conn.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET {', '.join(sets)} {where} RETURNING id",
            [*params, *guard_params],
        )
        return {row[0] for row in cursor.fetchall()}


def owned_where(jobs: Sequence[Job], *, plain: bool) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (and its parameters) of the rows of ``jobs`` still owned: each
    ``processing`` under its job's own lease token, no rerun asked and, when ``plain``,
    ``awaited`` still false (:func:`complete_rows`'s guards, for MySQL and SQLite)."""
    pks = [job.pk for job in jobs]
    params: list[Any] = [*pks, *([False] if plain else []), JobStatus.PROCESSING, False]
    for job in jobs:
        params += [job.pk, job.lease_token]
    tokens = " ".join("WHEN %s THEN %s" for _ in jobs)
    awaited = "awaited = %s AND " if plain else ""
    guard = f"{awaited}status = %s AND rerun = %s AND lease_token = CASE id {tokens} END"
    return f"WHERE id IN ({_in(pks)}) AND {guard}", params


def lock_owned(cursor: Any, table: str, where: str, params: list[Any]) -> set[int]:
    """MySQL/MariaDB: lock the rows ``where`` selects (:func:`owned_where`); return their pks.

    By the primary key, in pk order, as an enqueue with ``after`` locks its upstream
    rows (docs/workflows.md "Lock order"): left to itself, InnoDB scans the lease index
    (status, lease_expires_at) and locks in lease order, and every other worker's
    running row on its way.
    """
    cursor.execute(
        f"SELECT id FROM {table} FORCE INDEX (PRIMARY) {where} ORDER BY id FOR UPDATE", params
    )
    return {row[0] for row in cursor.fetchall()}


def _complete_rows_pg(
    using: str, items: Sequence[tuple[Job, Any, timedelta | None]], *, plain: bool = False
) -> set[int]:
    """PostgreSQL's :func:`complete_rows`: one prepared statement whatever the batch size.

    The jobs' ids, lease tokens and hold intervals are bound as arrays and their
    results as one JSON array (Python None stored as SQL NULL, as Django's
    ``JSONField`` stores it); the same guards and holds as the other vendors' CASE
    form, whose text grew with the batch and was parsed and bound by psycopg on the
    client each flush (a fifth of a no-op drain's CPU in the completer thread).
    """
    table = _q(using, Job._meta.db_table)
    now = "STATEMENT_TIMESTAMP()"
    ids = bigint_array([job.pk for job, _r, _d in items])
    tokens = text_array([job.lease_token for job, _r, _d in items])
    results = "[" + ",".join(json.dumps(result) for _j, result, _d in items) + "]"
    holds = nulls_or_list([dedupe or None for _j, _r, dedupe in items])
    sql = (
        f"UPDATE {table} AS j SET status = %s, result = NULLIF(u.result, 'null'::jsonb), "
        f"finished_at = {now}, updated_at = {now}, "
        "started_at = COALESCE(j.started_at, j.heartbeat_at), message = '', "
        "lease_token = '', lease_expires_at = NULL, "
        f"id_held_until = CASE WHEN u.hold IS NULL THEN j.id_held_until ELSE {now} + u.hold END, "
        "job_id_hash = CASE WHEN u.hold IS NULL THEN NULL ELSE j.job_id_hash END, "
        "unique_key_hash = CASE WHEN j.unique_mode = %s THEN NULL ELSE j.unique_key_hash END "
        "FROM ROWS FROM (unnest(%s::bigint[]), unnest(%s::text[]), "
        "jsonb_array_elements(%s::jsonb), unnest(%s::interval[])) AS u(id, token, result, hold) "
        "WHERE j.id = u.id AND j.status = %s AND j.rerun = false AND j.lease_token = u.token "
        f"{'AND j.awaited = false ' if plain else ''}RETURNING j.id"
    )
    params = [
        JobStatus.DONE,
        unique.UNTIL_EXECUTED,
        ids,
        tokens,
        results,
        holds,
        JobStatus.PROCESSING,
    ]
    with prepared.cursor(connections[using]) as cursor:  # the same text every flush
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}
