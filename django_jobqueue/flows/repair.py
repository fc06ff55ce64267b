"""The repair pass of batches and workflows (docs/workflows.md "Repair").

Every end of a job decides its batch's and its workflow's completion in the
transaction of its own write (:mod:`django_jobqueue.flows.endings`), so a crash
leaves nothing half done there. What else can leave a batch or a dependent
stranded is outside that transaction: a restored backup, rows changed or
deleted by hand, a write made by code that bypassed the job's storage. The
workers' housekeeping runs :func:`repair` every :data:`REPAIR_EVERY_S` seconds;
each finding is made right exactly once, under the same row locks and guarded
updates as the end path (two workers repairing at once make it once), with a
warning log line:

1. an edge still ``pending`` whose upstream job has ended: its state is set
   from the upstream's status and its dependent settled (an upstream job deleted
   before it ended counts as failed);
2. a ``blocked`` job with no pending edge: settled (due, cancelled or skipped);
3. a sealed batch or a workflow that has not finished while none of its jobs
   is left to end: its counts are taken from its jobs' rows (a job deleted
   meanwhile leaves the total), and it finishes, making its callbacks;
4. a batch finished within ``JOBQUEUE["REPAIR_WINDOW"]`` whose callback was
   made, but whose callback job row is gone: the callback is made again, once.

It also deletes settled edges whose dependent job is gone (pruned), at most
:data:`LIMIT` a pass, so the edge table does not outgrow the job table.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models import Count, Exists, OuterRef, Q

from ..core.conf import get_config
from ..core.dbclock import Now
from ..models import FINISHED_STATUSES, Batch, Dependency, Job, JobStatus, Workflow
from ..store.flowmodels import CALLBACK_KINDS, EDGE_DONE, EDGE_FAILED, EDGE_PENDING
from .endings import CANCELLED, DONE, FAILED, outcome_of, settle, settle_tallies

__all__ = ["REPAIR_EVERY_S", "RepairReport", "repair"]

logger = logging.getLogger(__name__)

#: How often (s) a foreman's housekeeping runs :func:`repair`.
REPAIR_EVERY_S = 30.0
#: Most findings of each kind made right per pass (the next pass takes the rest).
LIMIT = 500
#: The column of each callback's jid.
_JID = {"on_finish": "finish_jid", "on_success": "success_jid", "on_failure": "failure_jid"}


@dataclass
class RepairReport:
    """What one pass made right: edges settled, blocked jobs settled, batches and
    workflows finished, callbacks made again."""

    edges: int = 0
    blocked: int = 0
    finished: int = 0
    callbacks: int = 0
    #: Settled edges of jobs that are gone, deleted (housekeeping, not a repair).
    pruned: int = 0

    def __bool__(self) -> bool:
        return bool(self.edges or self.blocked or self.finished or self.callbacks)


def repair(using: str) -> RepairReport:
    """Run one repair pass on ``using``; return what it made right.

    Each kind is its own transaction. Raises the database's errors (the
    housekeeping loop logs them and tries again at its next pass).
    """
    report = RepairReport()
    report.edges = _stale_edges(using)
    report.blocked = _stale_blocked(using)
    report.finished = _unfinished(using)
    report.callbacks = _lost_callbacks(using)
    report.pruned = _prune_edges(using)
    return report


def _prune_edges(using: str) -> int:
    """Delete settled edges whose dependent job is gone (pruned or deleted): nothing
    reads them any more. At most :data:`LIMIT` a pass."""
    gone = ~Exists(Job.objects.using(using).filter(pk=OuterRef("dependent_id")))
    edges = Dependency.objects.using(using)
    pks = list(
        edges.exclude(state=EDGE_PENDING)
        .filter(gone)
        .order_by("pk")
        .values_list("pk", flat=True)[:LIMIT]
    )
    if pks:
        edges.filter(pk__in=pks).delete()
    return len(pks)


def _stale_edges(using: str) -> int:
    jobs = Job.objects.using(using)
    ended = jobs.filter(pk=OuterRef("upstream_id"), status__in=FINISHED_STATUSES)
    gone = jobs.filter(pk=OuterRef("upstream_id"))
    pending = Dependency.objects.using(using).filter(state=EDGE_PENDING).order_by("pk")
    rows = list(
        pending.filter(Exists(ended)).values_list(
            "pk", "upstream__status", "upstream__jid", "dependent_id"
        )[:LIMIT]
    )
    # An upstream job deleted before it ended (an id's cancel of a waiting job, an
    # operator's delete) will never end: its edges count as failed.
    rows += [
        (pk, "deleted", f"pk={upstream}", dependent)
        for pk, upstream, dependent in pending.exclude(Exists(gone)).values_list(
            "pk", "upstream_id", "dependent_id"
        )[:LIMIT]
    ]
    made = 0
    for pk, status, jid, dependent in rows:
        with transaction.atomic(using=using):
            state = EDGE_DONE if outcome_of(status) == DONE else EDGE_FAILED
            updated = (
                Dependency.objects.using(using)
                .filter(pk=pk, state=EDGE_PENDING)
                .update(state=state)
            )
            if updated:
                settle(using, [dependent])
                made += 1
                logger.warning(
                    "repair: an edge still waited for job %s, which ended %s; its "
                    "dependent was settled pk=%s",
                    jid,
                    status,
                    dependent,
                )
    return made


def _stale_blocked(using: str) -> int:
    pending = Dependency.objects.using(using).filter(
        dependent_id=OuterRef("pk"), state=EDGE_PENDING
    )
    rows = list(
        Job.objects.using(using)
        .filter(status=JobStatus.BLOCKED)
        .exclude(Exists(pending))
        .order_by("pk")
        .values_list("pk", "jid")[:LIMIT]
    )
    for pk, jid in rows:
        with transaction.atomic(using=using):
            settle(using, [pk])
        logger.warning("repair: job %s was blocked with no upstream job left to end", jid)
    return len(rows)


def _unfinished(using: str) -> int:
    made = 0
    model: Any
    for model in (Batch, Workflow):
        open_rows = model.objects.using(using).filter(finished_at__isnull=True)
        if model is Batch:
            open_rows = open_rows.filter(sealed=True)
        left = (
            Job.objects.using(using)
            .filter(**{f"{model._meta.model_name}_id": OuterRef("pk")})
            .exclude(status__in=FINISHED_STATUSES)
        )
        pks = list(
            open_rows.exclude(Exists(left)).order_by("pk").values_list("pk", flat=True)[:LIMIT]
        )
        for pk in pks:
            if _finish(using, model, pk):
                made += 1
    return made


def _finish(using: str, model: Any, pk: int) -> bool:
    """Take the counts of ``model`` row ``pk`` from its jobs and finish it, if still open."""
    with transaction.atomic(using=using):
        rows = model.objects.using(using).filter(pk=pk, finished_at__isnull=True)
        if connections[using].features.has_select_for_update:
            rows = rows.select_for_update()
        row = rows.first()
        if row is None:
            return False
        key = f"{model._meta.model_name}_id"
        counts = {DONE: 0, FAILED: 0, CANCELLED: 0}
        left = 0
        for status, n in (
            Job.objects.using(using)
            .filter(**{key: pk})
            .values_list("status")
            .annotate(n=Count("pk"))
            .order_by()
        ):
            outcome = outcome_of(status)
            if outcome is None:
                left += n
            else:
                counts[outcome] += n
        if left:
            return False  # a job was added meanwhile: not finished
        before = row.counts()
        # The rows' counts, but never below the stored ones: a job deleted since it
        # was counted (pruned, say) still counts as what it was.
        counts = {k: max(n, before[k]) for k, n in counts.items()}
        total = sum(counts.values())
        model.objects.using(using).filter(pk=pk).update(total=total, **counts)
        if model is Batch:
            settle_tallies(using, batches=[pk])
        else:
            settle_tallies(using, workflows=[pk])
        logger.warning(
            "repair: %s %s had every job ended but was not finished; counts were %s, now %s",
            model._meta.model_name,
            pk,
            before,
            {**counts, "total": total},
        )
        return True


def _lost_callbacks(using: str) -> int:
    window = get_config().REPAIR_WINDOW
    made = 0
    jobs = Job.objects.using(using)
    recent = Batch.objects.using(using).filter(finished_at__gte=Now() - window)
    for kind in CALLBACK_KINDS:
        column = _JID[kind]
        gone = ~Q(**{column: ""}) & ~Q(Exists(jobs.filter(jid=OuterRef(column))))
        lost = list(recent.filter(gone).order_by("pk").values_list("pk", column)[:LIMIT])
        if kind == "on_failure":  # made at a dead letter, perhaps long before the finish
            lost += list(
                Batch.objects.using(using)
                .filter(finished_at__isnull=True)
                .filter(gone)
                .order_by("pk")
                .values_list("pk", column)[:LIMIT]
            )
        for pk, jid in lost:
            with transaction.atomic(using=using):
                rows = Batch.objects.using(using).filter(pk=pk, **{column: jid})
                if jobs.filter(jid=jid).exists() or not rows.update(**{column: ""}):
                    continue  # another worker's pass made it meanwhile
                made += len(settle_tallies(using, batches=[pk]))
                logger.warning(
                    "repair: batch %s's %s callback job %s is gone; made again", pk, kind, jid
                )
    return made
