"""A new job joined to a batch or a workflow, and to the upstream jobs it waits for.

:func:`create_linked` is the enqueue path of a job with ``after``, ``batch`` or a
workflow step, and of every job enqueued inside a ``with batch()`` block: in one
transaction (a savepoint inside the caller's) the jobs are created as any job is
(:meth:`~django_jobqueue.store.managers.JobManager.create_job`,
:func:`~django_jobqueue.bulk.create_many`), then joined by one ``UPDATE`` per 500
jobs, their edges inserted and their upstream rows marked ``awaited``. A job with an
upstream not ended yet is stored ``blocked`` (the claim never scans it); one whose
upstream jobs all ended is settled at once by the rules of
:func:`django_jobqueue.flows.endings.settle` (due, cancelled or skipped).

The upstream rows are locked (``SELECT ... FOR UPDATE``) before their status is
read: an upstream job ending meanwhile either ended before (its end is read here)
or waits for this transaction and then sees the edge (docs/workflows.md
"Guarantees").
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import F, QuerySet

from .. import storage_retention
from ..core.exceptions import InvalidOption, InvalidRequest
from ..models import (
    DEAD_STATUSES,
    Batch,
    Dependency,
    Job,
    JobStatus,
    Workflow,
)
from ..store.flowmodels import EDGE_DONE, EDGE_FAILED, EDGE_PENDING, POLICIES, POLICY_CANCEL
from ..store.managers import EnqueueResult, JobSpec
from . import current

__all__ = [
    "FLOW_OPTIONS",
    "Link",
    "attach",
    "check_policy",
    "create_linked",
    "pop_link",
    "pop_wait",
    "wait_for",
    "wait_many",
]

#: The enqueue options of batches and workflows (docs/workflows.md).
FLOW_OPTIONS = frozenset({"after", "batch", "on_upstream_failure"})
#: Jobs per joining UPDATE (and per IN list of jids).
CHUNK = 500


@dataclass(frozen=True)
class Link:
    """What a new job is joined to: a batch's pk, a workflow's pk and step name, and
    the jids of its upstream jobs with the policy of those edges."""

    batch_id: int | None = None
    workflow_id: int | None = None
    step: str = ""
    after: tuple[str, ...] = ()
    policy: str = POLICY_CANCEL


def check_policy(policy: Any) -> str:
    """Return ``policy`` if it is one of ``cancel``, ``skip``, ``ignore``.

    Raises
    ------
    InvalidOption
        Otherwise.
    """
    if policy not in POLICIES:
        raise InvalidOption(f"on_upstream_failure must be one of {list(POLICIES)}: got {policy!r}.")
    return str(policy)


def _jids(after: Any) -> tuple[str, ...]:
    if isinstance(after, str | bytes) or not isinstance(after, Iterable):
        raise InvalidOption(f"after must be a list of jids: got {type(after).__name__}.")
    jids = []
    for jid in after:
        if hasattr(jid, "jid"):  # an EnqueueResult
            jid = jid.jid
        elif isinstance(getattr(jid, "id", None), str):  # a django.tasks TaskResult
            jid = jid.id
        if not isinstance(jid, str) or not jid or len(jid) > 32:
            raise InvalidOption(f"after must list jids (1 to 32 characters): got {jid!r}.")
        jids.append(jid)
    return tuple(dict.fromkeys(jids))


@contextmanager
def wait_for(*upstream: Any, on_upstream_failure: str = POLICY_CANCEL) -> Iterator[None]:
    """Make every job enqueued inside the block wait for the jobs ``upstream``.

    For code that enqueues through an API without an ``after`` option, Django's
    ``task.enqueue()`` above all (docs/workflows.md "django.tasks")::

        with wait_for(fetch_result):          # a TaskResult, EnqueueResult or jid
            report.enqueue(month)

    ``on_upstream_failure`` is the edges' policy (``cancel``, ``skip``, ``ignore``).
    An ``after`` given to an enqueue inside the block wins over the block's. Whether
    the jids name jobs is checked at each enqueue (``InvalidRequest``).

    Raises
    ------
    InvalidOption
        If an upstream is not a jid, an ``EnqueueResult`` or a ``TaskResult``, or the
        policy is not one of the three.
    """
    after = (_jids(upstream), check_policy(on_upstream_failure))
    token = current.set_after(after)
    try:
        yield
    finally:
        current.reset_after(token)


def pop_link(options: dict[str, Any]) -> Link | None:
    """Take the flow options out of ``options``; return their :class:`Link`, or None.

    ``after``: jids (or ``EnqueueResult``) of the jobs to wait for; ``batch``: the pk
    of an existing batch to join (an open batch); ``on_upstream_failure``: the
    edges' policy (``cancel``, the default, ``skip`` or ``ignore``).

    Raises
    ------
    InvalidOption
        If one of them is malformed.
    """
    if options.keys().isdisjoint(FLOW_OPTIONS):
        scoped = current.open_after()  # a wait_for() block
        return None if scoped is None else Link(after=scoped[0], policy=scoped[1])
    if "after" not in options and (scoped := current.open_after()) is not None:
        options.setdefault("on_upstream_failure", scoped[1])
        options["after"] = scoped[0]
    after = _jids(options.pop("after", None) or ())
    batch = options.pop("batch", None)
    if batch is not None:
        batch = getattr(batch, "id", batch)  # a batch handle, or its pk
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise InvalidOption(f"batch must be a batch's id (an int >= 1): got {batch!r}.")
    policy = check_policy(options.pop("on_upstream_failure", POLICY_CANCEL))
    return Link(batch_id=batch, after=after, policy=policy)


def pop_wait(options: dict[str, Any]) -> tuple[tuple[str, ...], str] | None:
    """Take ``after`` and ``on_upstream_failure`` out of one job's ``options`` (of
    ``enqueue_many``); return (upstream jids, policy), or None if it waits for none.

    Raises
    ------
    InvalidOption
        If one of them is malformed.
    """
    if "after" not in options and (scoped := current.open_after()) is not None:
        options.setdefault("on_upstream_failure", scoped[1])
        options["after"] = scoped[0]
    after = _jids(options.pop("after", None) or ())
    policy = check_policy(options.pop("on_upstream_failure", POLICY_CANCEL))
    return (after, policy) if after else None


def create_linked(
    specs: Sequence[JobSpec],
    link: Link | None,
    *,
    many: bool,
    waits: Sequence[tuple[tuple[str, ...], str] | None] | None = None,
) -> list[EnqueueResult]:
    """Create the jobs of ``specs`` joined by ``link`` and the open ``with batch()`` block.

    ``many``: created as :func:`~django_jobqueue.bulk.create_many` does (answers
    ``deduplicated`` rather than raising); else ``specs`` is one job, created as
    :func:`~django_jobqueue.enqueue.create_job` does. ``waits``: per spec, the jids
    it waits for and the edges' policy (None: ``link.after`` and ``link.policy``
    for every spec). A deduplicated job (its id or unique key held by another job)
    joins nothing and waits for nothing: the holder is not this call's.

    Raises
    ------
    InvalidRequest
        If ``link.batch_id`` names no batch, or an ``after`` a jid no job has.
    DuplicateJob, LockTimeout, WrongDatabase
        As the creation paths raise them. Nothing is written on any error.
    """
    from ..bulk import create_many  # the same layer; deferred as enqueue defers it

    link = link or Link()
    if waits is None:
        waits = [(link.after, link.policy) if link.after else None] * len(specs)
    using = specs[0].using
    block = current.open_block()
    with transaction.atomic(using=using):
        # Job rows before batch rows, as a job's end takes them (its own row, then
        # its batch's: docs/workflows.md "Lock order"), else an enqueue with
        # ``batch=B, after=[J]`` racing J's end would deadlock.
        wanted = [jid for wait in waits if wait is not None for jid in wait[0]]
        upstream = _lock_upstream(using, list(dict.fromkeys(wanted))) if wanted else {}
        if link.batch_id is not None:
            _check_open(using, link.batch_id)
        results = create_many(specs) if many else [Job.objects.create_job(specs[0])]
        new = [result.jid for result in results if not result.deduplicated]
        if new:
            batch_id = link.batch_id
            if batch_id is None and block is not None and block.using == using:
                block.jids.extend(new)  # joined, and counted, when the block ends
            attach(
                using,
                new,
                batch_id=batch_id,
                workflow_id=link.workflow_id,
                steps=dict.fromkeys(new, link.step) if link.step else None,
            )
        waiting = [
            (result.jid, wait)
            for result, wait in zip(results, waits, strict=True)
            if wait is not None and not result.deduplicated
        ]
        if waiting:
            pks: dict[str, int] = {}
            jids = [jid for jid, _wait in waiting]
            for start in range(0, len(jids), CHUNK):
                chunk = jids[start : start + CHUNK]
                pks.update(Job.objects.using(using).filter(jid__in=chunk).values_list("jid", "pk"))
            wait_many(
                using,
                [
                    # A jid missing from ``upstream``: done and deleted (RETENTION 0).
                    (
                        pks[jid],
                        {upstream[u][0]: upstream[u][1] for u in after if u in upstream},
                        policy,
                    )
                    for jid, (after, policy) in waiting
                ],
            )
    return results


def _check_open(using: str, batch_id: int) -> None:
    """Lock batch ``batch_id``'s row until this transaction ends, if it has not finished.

    A job of the batch adds jobs while it runs, so the batch cannot have finished
    under it; from anywhere else, a finished batch (its callbacks made) takes no
    more jobs.

    Raises
    ------
    InvalidRequest
        If there is no such batch, or it has finished.
    """
    rows = Batch.objects.using(using).filter(pk=batch_id)
    if connections[using].features.has_select_for_update:
        rows = rows.select_for_update()
    found = list(rows.values_list("finished_at", flat=True)[:1])
    if not found:
        raise InvalidRequest(f"No batch has id {batch_id}.")
    if found[0] is not None:
        raise InvalidRequest(f"Batch {batch_id} has finished: it takes no more jobs.")


def _lock_upstream(using: str, jids: Sequence[str]) -> dict[str, tuple[int, str]]:
    """Lock the rows of ``jids`` in pk order; return {jid: (pk, status)}.

    PostgreSQL locks the rows a ``SELECT ... ORDER BY ... FOR UPDATE`` returns in
    that order (it sorts, then locks). InnoDB locks them as the index it scans
    meets them, before sorting: by the ``jid`` index, in the order of the jids
    (random), and a batched ``done`` locking the same rows in pk order deadlocked
    it (1213). So on MySQL the pks are read first, unlocked (a row's jid never
    changes), and the rows locked by pk alone, which only the primary key serves
    (docs/workflows.md "Lock order"). That unlocked read sees the caller's snapshot
    when its transaction is REPEATABLE READ: a job committed since is not in it,
    and is looked up again by a locking read (which reads the latest rows), after
    the others are locked.

    With ``JOBQUEUE["RETENTION"]`` zero a done job's row is deleted at its end
    (docs/design.md#retention), so a jid that names no job is taken for one done
    and is left out of the answer: a dependent waits for none of those.

    Raises
    ------
    InvalidRequest
        If a jid names no job (it was never made, or was pruned), with a retention.
    """
    jobs = Job.objects.using(using)
    rows = jobs.filter(jid__in=list(jids)).order_by("pk")
    if connections[using].vendor != "mysql":
        found = _locked(rows)
    else:
        pks = list(rows.values_list("pk", flat=True))
        found = _locked(jobs.filter(pk__in=pks).order_by("pk"))
        late = [jid for jid in jids if jid not in found]
        if late:
            found.update(_locked(jobs.filter(jid__in=late).order_by("pk")))
    missing = [jid for jid in jids if jid not in found]
    if missing and storage_retention.keeps_done():
        raise InvalidRequest(f"after names jobs that do not exist: {missing[:5]}.")
    return found


def _locked(rows: QuerySet[Job]) -> dict[str, tuple[int, str]]:
    """Lock ``rows`` (a job queryset; not on SQLite, whose write transaction is the
    lock) and return {jid: (pk, status)} of them."""
    if connections[rows.db].features.has_select_for_update:
        rows = rows.select_for_update()
    return {jid: (pk, status) for pk, jid, status in rows.values_list("pk", "jid", "status")}


def wait_many(using: str, waits: Sequence[tuple[int, dict[int, str], str]]) -> None:
    """Make each dependent wait for its upstream jobs, then settle it.

    ``waits`` holds (dependent pk, {upstream pk: its status}, the edges' policy);
    the caller locked the upstream rows (or made them in this transaction). The
    edges are inserted in the state each upstream's status gives, the live
    upstream rows marked ``awaited``, the dependents stored ``blocked``, then
    settled: a dependent whose upstream jobs all ended becomes due, cancelled or
    skipped in this transaction (:func:`django_jobqueue.flows.endings.settle`).
    """
    from .endings import settle  # endings enqueues callbacks: it imports this module

    edges = []
    live: set[int] = set()
    for dependent, upstream, policy in waits:
        for pk, status in upstream.items():
            if status == JobStatus.DONE:
                state = EDGE_DONE
            elif status in DEAD_STATUSES or status == JobStatus.CANCELLED:
                state = EDGE_FAILED
            else:
                state = EDGE_PENDING
                live.add(pk)
            edges.append(
                Dependency(upstream_id=pk, dependent_id=dependent, policy=policy, state=state)
            )
    Dependency.objects.using(using).bulk_create(edges, batch_size=CHUNK)
    jobs = Job.objects.using(using)
    awaited = sorted(live)
    for start in range(0, len(awaited), CHUNK):
        jobs.filter(pk__in=awaited[start : start + CHUNK]).update(awaited=True)
    dependents = [dependent for dependent, _u, _p in waits]
    for start in range(0, len(dependents), CHUNK):
        jobs.filter(pk__in=dependents[start : start + CHUNK], waiting=True).update(
            status=JobStatus.BLOCKED, waiting=False
        )
    settle(using, dependents)


def attach(
    using: str,
    jids: Sequence[str],
    *,
    batch_id: int | None = None,
    workflow_id: int | None = None,
    steps: dict[str, str] | None = None,
) -> None:
    """Join the new jobs ``jids`` to a batch and a workflow, and count them there.

    ``steps`` maps jids to their step names in the workflow. One ``UPDATE`` per
    :data:`CHUNK` jobs (a step name each by ``CASE``), then one per tally.
    """
    from django.db.models import Case, Value, When

    fields: dict[str, Any] = {}
    if batch_id is not None:
        fields["batch_id"] = batch_id
    if workflow_id is not None:
        fields["workflow_id"] = workflow_id
    if not fields and not steps:
        return
    for start in range(0, len(jids), CHUNK):
        chunk = jids[start : start + CHUNK]
        update = dict(fields)
        if steps:
            update["step"] = Case(
                *(When(jid=jid, then=Value(steps[jid])) for jid in chunk if jid in steps),
                default=F("step"),
            )
        Job.objects.using(using).filter(jid__in=list(chunk)).update(**update)
    if batch_id is not None:
        Batch.objects.using(using).filter(pk=batch_id).update(total=F("total") + len(jids))
    if workflow_id is not None:
        Workflow.objects.using(using).filter(pk=workflow_id).update(total=F("total") + len(jids))
