"""What a job's end does to its batch, its workflow and its dependents (docs/workflows.md).

Every terminal write of a job of a batch or a workflow, or of a job another job
waits for (``done`` by :func:`~django_jobqueue.storage.complete` and the batched
``done``, a dead letter by :func:`~django_jobqueue.storage.fail`, the reaper and
expiry, ``cancelled`` by the worker and by operators) calls :func:`ended` in the
transaction of that write. Nothing here is an in-memory counter: in that one
transaction

1. each upstream edge of the ended jobs leaves ``pending`` (``done`` or
   ``failed``) by a guarded ``UPDATE ... WHERE state = 'pending'``;
2. their dependents are settled (:func:`settle`), under their row locks: due when
   no edge is pending and none failed under ``cancel`` or ``skip``; ``cancelled``
   at a failed ``cancel`` edge; ``done`` unrun at a failed ``skip`` edge. A
   dependent ended so is itself an ended job of step 1, down the graph;
3. the counts of each batch and workflow grow (``SET done = done + n``), in pk
   order, and :func:`settle_tallies` decides, on the row it holds locked, what
   finished: ``finished_at`` is set once, and each callback is enqueued once, its
   jid stored by a guarded ``UPDATE ... WHERE <kind>_jid = ''``.

A crash anywhere rolls all of it back with the job's own state change; what a
crash cannot leave half done, the repair pass (:mod:`django_jobqueue.flows.repair`)
still checks, for restored backups and rows changed by hand.

A job with no batch, no workflow and no dependent (:func:`linked` false) never
reaches this module: its end pays nothing for it.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from django.db import connections
from django.db.models import Case, Exists, F, OuterRef, Subquery, When

from ..core.dbclock import Now
from ..core.origin import BATCH_CALLBACK, enqueued_by
from ..enqueue import enqueue_job
from ..models import DEAD_STATUSES, Batch, Dependency, Job, JobStatus, Workflow
from ..store import unique
from ..store.flowmodels import (
    CALLBACK_KINDS,
    EDGE_DONE,
    EDGE_FAILED,
    EDGE_PENDING,
    POLICY_CANCEL,
    POLICY_IGNORE,
    POLICY_SKIP,
)
from ..store.wakeups import notify_on_commit
from . import current

__all__ = [
    "CANCELLED",
    "DONE",
    "FAILED",
    "Ended",
    "ended",
    "due_callbacks",
    "ended_of",
    "linked",
    "make_callback",
    "outcome_of",
    "settle",
    "settle_tallies",
]

logger = logging.getLogger(__name__)

#: How a job ended, as the counts name it.
DONE, FAILED, CANCELLED = "done", "failed", "cancelled"
#: Jobs per IN list.
_CHUNK = 500


class Ended(NamedTuple):
    """A job whose terminal state was just written: pk, its links, and how it ended."""

    pk: int
    batch_id: int | None
    workflow_id: int | None
    awaited: bool
    outcome: str


def linked(job: Any) -> bool:
    """Whether ``job``'s end has anything to do here (from its columns, no query)."""
    return job.batch_id is not None or job.workflow_id is not None or bool(job.awaited)


def outcome_of(status: str) -> str | None:
    """Return ``done``, ``failed`` or ``cancelled`` for a terminal status, else None."""
    if status == JobStatus.DONE:
        return DONE
    if status in DEAD_STATUSES:
        return FAILED
    if status == JobStatus.CANCELLED:
        return CANCELLED
    return None


def ended_of(job: Any, status: str) -> Ended:
    """Return the :class:`Ended` of ``job`` (a ``Job``) now stored in ``status``."""
    outcome = outcome_of(status)
    if outcome is None:
        raise ValueError(f"{status!r} is not a terminal status")
    return Ended(job.pk, job.batch_id, job.workflow_id, bool(job.awaited), outcome)


def _chunks(values: Sequence[Any]) -> Iterable[Sequence[Any]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]


def ended(using: str, items: Iterable[Ended]) -> None:
    """Do what the end of ``items`` does, in the caller's transaction on ``using``.

    The caller has written each job's terminal state in this transaction (and so
    holds its row). Raises the database's errors; the caller's transaction then
    rolls back with the job's own write.
    """
    work = list(items)
    tallies: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    # The callers' ``awaited`` comes from a copy of the row that may predate a
    # dependent enqueued while the job ran (a worker's copy, read at the claim), so
    # the edges of the jobs of a batch or a workflow are looked up whatever it says;
    # the row, written in this transaction, is ours, so the edges found are all.
    # Jobs ended below (settled dependents) carry ``awaited`` read from their row.
    awaited = [item for item in work if item.awaited or item.batch_id or item.workflow_id]
    while work:
        for item in work:
            if item.batch_id is not None:
                tallies["batch", item.batch_id][item.outcome] += 1
            if item.workflow_id is not None:
                tallies["workflow", item.workflow_id][item.outcome] += 1
        dependents = _leave_pending(using, awaited)
        work = _resolve(using, dependents) if dependents else []
        awaited = [item for item in work if item.awaited]
    _count(using, tallies)


def _leave_pending(using: str, items: Sequence[Ended]) -> list[int]:
    """Move the pending edges of ``items`` (upstream jobs) to done or failed; return
    their dependents' pks."""
    dependents: set[int] = set()
    edges = Dependency.objects.using(using)
    for state, outcomes in ((EDGE_DONE, (DONE,)), (EDGE_FAILED, (FAILED, CANCELLED))):
        pks = [item.pk for item in items if item.outcome in outcomes]
        for chunk in _chunks(pks):
            pending = edges.filter(upstream_id__in=list(chunk), state=EDGE_PENDING)
            found = list(pending.values_list("dependent_id", flat=True))
            if found:
                pending.update(state=state)
                dependents.update(found)
    return sorted(dependents)


def settle(using: str, pks: Sequence[int]) -> None:
    """Settle the blocked jobs ``pks`` by their edges (see the module's docstring), in
    the caller's transaction; a job ended so ends as :func:`ended` says."""
    if pks:
        ended(using, _resolve(using, pks))


def _resolve(using: str, pks: Sequence[int]) -> list[Ended]:
    """Make due, cancel or skip those of ``pks`` still ``blocked`` whose edges decide
    it; return the jobs ended so."""
    jobs = Job.objects.using(using)
    edges = Dependency.objects.using(using).filter(dependent_id=OuterRef("pk"))
    failed = edges.filter(state=EDGE_FAILED)
    conn = connections[using]
    lock = conn.features.has_select_for_update
    out: list[Ended] = []
    for chunk in _chunks(list(pks)):
        blocked = jobs.filter(pk__in=list(chunk), status=JobStatus.BLOCKED).order_by("pk")
        if lock:
            # Lock first, read the edges in the next statement: a statement reads
            # the rows committed when it began (READ COMMITTED), so edges read by
            # the statement that waited for the lock would miss the end of an
            # upstream job committed meanwhile by the transaction that held it,
            # and two upstream jobs ending at once would each see the other's
            # edge pending and leave their dependent blocked for good. On MySQL
            # by pk alone: InnoDB locks in the order of the index it scans, and
            # with ``status`` in the WHERE that may be a status index, not pk
            # order (docs/workflows.md "Lock order"); the status is read next.
            mine = (
                jobs.filter(pk__in=list(chunk)).order_by("pk")
                if conn.vendor == "mysql"
                else blocked
            )
            locked = list(mine.select_for_update().values_list("pk", flat=True))
            if not locked:
                continue
            blocked = jobs.filter(pk__in=locked, status=JobStatus.BLOCKED).order_by("pk")
        rows = list(
            blocked.annotate(
                cancel=Exists(failed.filter(policy=POLICY_CANCEL)),
                skip=Exists(failed.filter(policy=POLICY_SKIP)),
                wait=Exists(
                    edges.exclude(state=EDGE_DONE).exclude(state=EDGE_FAILED, policy=POLICY_IGNORE)
                ),
                reason=Subquery(
                    failed.exclude(policy=POLICY_IGNORE).order_by("pk").values("upstream__jid")[:1]
                ),
            ).values_list(
                "pk",
                "queue",
                "batch_id",
                "workflow_id",
                "awaited",
                "cancel",
                "skip",
                "wait",
                "reason",
            )  # fmt: skip
        )
        due = [(pk, queue) for pk, queue, _b, _w, _a, cancel, skip, wait, _r in rows if not wait]
        if due:
            jobs.filter(pk__in=[pk for pk, _q in due], status=JobStatus.BLOCKED).update(
                status=JobStatus.INIT,
                waiting=True,
                run_at=Case(When(run_at__gt=Now(), then=F("run_at")), default=Now()),
                updated_at=Now(),
            )
            for queue in sorted({queue for _pk, queue in due}):
                notify_on_commit(using, queue)
        by_message: dict[tuple[str, str], list[tuple[Any, ...]]] = defaultdict(list)
        for row in rows:
            pk, _q, batch_id, workflow_id, awaited, cancel, skip, _wait, reason = row
            if cancel:
                by_message[JobStatus.CANCELLED, f"cancelled: upstream job {reason} failed"].append(
                    row
                )
            elif skip:
                by_message[JobStatus.DONE, f"skipped: upstream job {reason} failed"].append(row)
        for (status, message), group in by_message.items():
            fields: dict[str, Any] = {
                "status": status,
                "finished_at": Now(),
                "updated_at": Now(),
                "message": message,
                "result": None,
                **unique.cancel_release(),
            }
            jobs.filter(pk__in=[row[0] for row in group], status=JobStatus.BLOCKED).update(**fields)
            outcome = DONE if status == JobStatus.DONE else CANCELLED
            out.extend(Ended(row[0], row[2], row[3], bool(row[4]), outcome) for row in group)
    return out


def _count(using: str, tallies: dict[tuple[str, int], Counter[str]]) -> None:
    """Add ``tallies`` to the batches' and workflows' counts (pk order), then decide
    what finished, where the counts read back say something may have."""
    batches: list[int] = []
    workflows: list[int] = []
    for (kind, pk), counts in sorted(tallies.items()):
        model = Batch if kind == "batch" else Workflow
        state = _add_counts(using, model, pk, counts)
        if state is not None and _may_have_finished(kind, state):
            (batches if kind == "batch" else workflows).append(pk)
    if batches or workflows:
        settle_tallies(using, batches=batches, workflows=workflows)


#: What :func:`_add_counts` reads back: the counts, ``finished_at``, and for a batch
#: whether it is sealed, each callback asked for and each callback's jid. Columns
#: as stored, tested in Python: SQLite 3.40's ``RETURNING "finished_at" IS NULL``
#: answers 0 for a NULL of an indexed column.
_TALLY = ("total", "done", "failed", "cancelled", "finished_at")
_BATCH = (
    "sealed",
    "on_failure",
    "failure_jid",
    "on_success",
    "success_jid",
    "on_finish",
    "finish_jid",
)


def _add_counts(using: str, model: Any, pk: int, counts: Counter[str]) -> dict[str, Any] | None:
    """Add ``counts`` to row ``pk`` of ``model``; return its columns after (None: no row).

    One ``UPDATE ... RETURNING`` on PostgreSQL and SQLite; on MySQL the ``UPDATE``,
    then a read of the row it now holds locked.
    """
    conn = connections[using]
    quote = conn.ops.quote_name
    read = [*_TALLY, *(_BATCH if model is Batch else ())]
    columns = ", ".join(quote(column) for column in read)
    table = quote(model._meta.db_table)
    outcomes = sorted(counts)
    sets = ", ".join(f"{quote(o)} = {quote(o)} + %s" for o in outcomes)
    params = [counts[o] for o in outcomes]
    where = f"WHERE {quote('id')} = %s"
    with conn.cursor() as cursor:
        if conn.vendor in ("postgresql", "sqlite"):
            cursor.execute(
                f"UPDATE {table} SET {sets} {where} RETURNING {columns}",  # noqa: S608
                [*params, pk],
            )
        else:
            cursor.execute(f"UPDATE {table} SET {sets} {where}", [*params, pk])  # noqa: S608
            cursor.execute(f"SELECT {columns} FROM {table} {where}", [pk])  # noqa: S608
        row = cursor.fetchone()
    if row is None:
        return None
    return dict(zip(read, row, strict=True))


def _may_have_finished(kind: str, state: dict[str, Any]) -> bool:
    """Whether a tally in ``state`` (:func:`_add_counts`) may have something to make:
    :func:`settle_tallies` then decides it on the locked row."""
    pending = state["total"] - state["done"] - state["failed"] - state["cancelled"]
    is_open = state["finished_at"] is None
    if kind == "workflow":
        return pending <= 0 and is_open
    if state["failed"] > 0 and state["on_failure"] is not None and not state["failure_jid"]:
        return True
    if not state["sealed"] or pending > 0:
        return False
    return (
        is_open
        or (state["on_finish"] is not None and not state["finish_jid"])
        or (state["on_success"] is not None and not state["success_jid"])
    )


def settle_tallies(
    using: str, *, batches: Sequence[int] = (), workflows: Sequence[int] = ()
) -> list[str]:
    """Finish the batches and workflows of these pks whose jobs all ended, and make
    each callback due; return the jids of the callbacks made.

    In the caller's transaction. Each row is read locked (``FOR UPDATE``), so one
    transaction alone decides; each decision is then written by a guarded update
    (``finished_at IS NULL``, ``<kind>_jid = ''``), so a second look, by the repair
    pass say, makes nothing twice.
    """
    made: list[str] = []
    lock = connections[using].features.has_select_for_update
    for pk in sorted(set(workflows)):
        flows = Workflow.objects.using(using).filter(pk=pk, finished_at__isnull=True)
        row = (flows.select_for_update() if lock else flows).first()
        if row is not None and row.pending == 0 and row.total > 0:
            flows.update(finished_at=Now())
    for pk in sorted(set(batches)):
        rows = Batch.objects.using(using).filter(pk=pk)
        batch = (rows.select_for_update() if lock else rows).first()
        if batch is not None:
            made.extend(_batch_callbacks(using, batch))
    return made


def due_callbacks(batch: Batch) -> list[str]:
    """Return the callback kinds of ``batch`` due by its counts and not made yet."""
    finished = batch.sealed and batch.pending == 0
    due = []
    for kind in CALLBACK_KINDS:
        spec = getattr(batch, kind)
        if spec is None or getattr(batch, _JID[kind]):
            continue
        if (
            (kind == "on_failure" and batch.failed > 0)
            or (kind == "on_success" and finished and batch.done == batch.total)
            or (kind == "on_finish" and finished)
        ):
            due.append(kind)
    return due


#: The column that stores each callback's jid.
_JID = {"on_finish": "finish_jid", "on_success": "success_jid", "on_failure": "failure_jid"}


def _batch_callbacks(using: str, batch: Batch) -> list[str]:
    made = []
    rows = Batch.objects.using(using).filter(pk=batch.pk)
    if batch.sealed and batch.pending == 0 and batch.finished_at is None:
        rows.filter(finished_at__isnull=True).update(finished_at=Now())
    for kind in due_callbacks(batch):
        jid = make_callback(using, batch, kind)
        if not rows.filter(**{_JID[kind]: ""}).update(**{_JID[kind]: jid}):
            raise RuntimeError(f"batch {batch.pk}: {kind} made twice")  # the row is ours
        made.append(jid)
    return made


def make_callback(using: str, batch: Batch, kind: str) -> str:
    """Enqueue ``batch``'s ``kind`` callback (in the caller's transaction); return its jid."""
    spec = getattr(batch, kind)
    options = dict(spec.get("options") or {})
    queue = options.pop("queue", None) or batch.queue or None
    options.pop("step", None)
    payload = {"batch": batch.pk, "counts": batch.counts(), "payload": spec.get("payload")}
    # A callback joins no batch block and waits for no wait_for() block open here.
    token, after = current.set_block(None), current.set_after(None)
    try:
        with enqueued_by(f"{BATCH_CALLBACK}{batch.pk}:{kind}"):
            result = enqueue_job(queue, spec["job_type"], payload, **options)
    finally:
        current.reset_after(after)
        current.reset_block(token)
    logger.info("batch %s %s callback made jid=%s", batch.pk, kind, result.jid)
    return result.jid
