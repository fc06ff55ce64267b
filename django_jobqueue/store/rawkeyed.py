"""PostgreSQL's keyed insert: creation locks tried, row inserted and holders read, in one statement.

For a job with an id or a unique key (docs/design.md#unique-keys), the plain enqueue's raw
insert (:mod:`django_jobqueue.store.rawinsert`) inside the lock protocol (docs/design.md#creation),
as one
round trip: :func:`insert_unless_held`. The managers call it first and fall back to
their locked path (:mod:`django_jobqueue.store.locks`) whenever it cannot decide.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections

from ..core import prepared
from ..core.validation import hold_hash
from .rawinsert import Row, insert_plan, wake_local, wakes_by_notify
from .wakeups import CHANNEL

__all__ = ["insert_unless_held"]


def insert_unless_held(
    row: Row, lock_keys: Sequence[int], *, wake: bool
) -> tuple[bool, bool, list[tuple[str, str, bool, bool]]]:
    """PostgreSQL: try the creation locks, insert, and read the holders, in one statement.

    The locks are tried, never waited for (``pg_try_advisory_xact_lock``, in the
    sorted order of their names: a later key is tried only once the earlier ones
    are held). Once they are all held, ``row`` is inserted unless a row already
    carries the id's or the key's hash in its queue: the unique indexes over
    (queue, hash) decide (``ON CONFLICT DO NOTHING``), the last line of
    :mod:`django_jobqueue.store.locks` and here the only one on the common path, so an
    add without a holder reads nothing. Only when nothing was inserted does the
    statement read the rows holding the hashes (live or stale holds), from its
    snapshot: a holder committed while the locks were tried is not among them, and
    the caller's locked path then decides.

    Parameters
    ----------
    row:
        The job, with an id or a unique key or both.
    lock_keys:
        :func:`django_jobqueue.store.locks.lock_key` of its lock names, in the names' order.
    wake:
        Whether a ``pg_notify`` of its queue rides the insert (a due job).

    Returns
    -------
    tuple
        ``(locked, inserted, holders)``: whether every lock was had, whether the row
        was inserted, and, when it was not, ``(jid, status, holds_id, holds_key)`` of
        each row in the statement's snapshot that carries the id's or the key's hash
        (live or stale hold; none when the holder committed after the snapshot).
    """
    spec = row.spec
    using = spec.using
    plan = insert_plan(using)
    conn = connections[using]

    lock = "true"
    for _key in reversed(lock_keys):  # nested: a later key is tried once the earlier is held
        lock = f"CASE WHEN pg_try_advisory_xact_lock(%s) THEN {lock} ELSE false END"
    id_hash = None if spec.job_id is None else hold_hash(spec.job_id)
    key_hash = None if spec.unique_key is None else hold_hash(spec.unique_key)
    params: list[Any] = list(lock_keys)
    values = plan.row(row, 0, params, conn)
    params += [id_hash, key_hash, spec.queue, id_hash, key_hash]
    notify = wake and wakes_by_notify(using)
    now = "STATEMENT_TIMESTAMP()"
    # The unique indexes over (queue, hash) decide whether the row goes in (ON
    # CONFLICT DO NOTHING), not a read of the holders: the planner's choice for that
    # read, made once per prepared statement, was a scan of the whole queue when the
    # statement was first planned on a young table (no statistics yet), and every
    # add paid for it until an ANALYZE. The holders are read only when the insert
    # did not happen (a one-time filter skips the read otherwise).
    sql = " ".join(
        [
            f"WITH l AS MATERIALIZED (SELECT {lock} AS ok),",
            f"i AS ({plan.head}SELECT {values[1:-1]} FROM l",  # noqa: S608 - placeholders
            "WHERE l.ok ON CONFLICT DO NOTHING RETURNING 1),",
            "h AS MATERIALIZED (SELECT jid, status,",
            "COALESCE(job_id_hash = %s AND (id_held_until IS NULL",
            f"OR id_held_until > {now}), false) AS holds_id,",
            f"COALESCE(unique_key_hash = %s AND unique_expires_at > {now}, false) AS holds_key",
            f"FROM {plan.table}, l WHERE l.ok AND NOT EXISTS (SELECT 1 FROM i)",  # noqa: S608
            "AND queue = %s AND (job_id_hash = %s OR unique_key_hash = %s))",
            f"SELECT l.ok, (SELECT count({'pg_notify(%s, %s)' if notify else '*'}) FROM i),",  # noqa: S608
            "h.jid, h.status, h.holds_id, h.holds_key FROM l LEFT JOIN h ON true",
        ]
    )
    if notify:
        params.extend([CHANNEL, spec.queue])
    with prepared.cursor(conn) as cursor:
        cursor.execute(sql, params)
        result = cursor.fetchall()
    locked = bool(result[0][0])
    inserted = bool(result[0][1])
    holders = [(r[2], r[3], r[4], r[5]) for r in result if r[2] is not None]
    if inserted and wake:
        wake_local(using)
    return locked, inserted, holders
