"""A retried dead letter resumes its batch and workflow (docs/workflows.md "Retrying a
failed step").

When an operator retries a dead letter (``retry_jobs``: console, admin, CLI), the
job's end is taken back in the transaction of its restart:

- its batch's and workflow's ``failed`` count drops by one and ``finished_at`` is
  cleared (a callback already made stays made: each is made once);
- its edges that failed become ``pending`` again;
- each dependent its death ended without running (``cancelled`` or skipped by
  the policy, ``attempt`` 0) is ``blocked`` again, its count taken back, and the
  same is done for that dependent's own dependents, down the graph. It then runs
  after the retried job is done.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from django.db.models import F, Q

from ..models import Batch, Dependency, Job, JobStatus, Workflow
from ..store.flowmodels import EDGE_FAILED, EDGE_PENDING, POLICY_IGNORE
from .endings import CANCELLED, DONE, Ended

__all__ = ["reopen"]

_CHUNK = 500
#: The messages the policies store on a dependent they end unrun (endings._resolve).
_UNRUN = Q(status=JobStatus.CANCELLED, message__startswith="cancelled: upstream job ") | Q(
    status=JobStatus.DONE, message__startswith="skipped: upstream job "
)


def reopen(using: str, items: Iterable[Ended]) -> None:
    """Take back the ends of ``items`` (jobs just restarted), in the caller's transaction."""
    work = list(items)
    tallies: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    jobs = Job.objects.using(using)
    edges = Dependency.objects.using(using)
    while work:
        for item in work:
            if item.batch_id is not None:
                tallies["batch", item.batch_id][item.outcome] += 1
            if item.workflow_id is not None:
                tallies["workflow", item.workflow_id][item.outcome] += 1
        upstream = [item.pk for item in work if item.awaited]
        dependents: set[int] = set()
        for chunk in _chunks(upstream):
            reopened = edges.filter(upstream_id__in=list(chunk)).exclude(state=EDGE_PENDING)
            dependents.update(
                reopened.exclude(policy=POLICY_IGNORE, state=EDGE_FAILED).values_list(
                    "dependent_id", flat=True
                )
            )
            reopened.update(state=EDGE_PENDING)
        work = []
        for chunk in _chunks(sorted(dependents)):
            unrun = (
                jobs.filter(_UNRUN, pk__in=list(chunk), attempt=0, started_at__isnull=True)
                .order_by("pk")
                .select_for_update()
            )
            rows = list(unrun.values_list("pk", "batch_id", "workflow_id", "awaited", "status"))
            if not rows:
                continue
            jobs.filter(pk__in=[row[0] for row in rows]).update(
                status=JobStatus.BLOCKED, waiting=False, finished_at=None, message="", result=None
            )
            work.extend(
                Ended(pk, b, w, bool(a), DONE if status == JobStatus.DONE else CANCELLED)
                for pk, b, w, a, status in rows
            )
    for (kind, pk), counts in sorted(tallies.items()):
        model = Batch if kind == "batch" else Workflow
        model.objects.using(using).filter(pk=pk).update(
            finished_at=None, **{outcome: F(outcome) - n for outcome, n in counts.items()}
        )


def _chunks(values: Sequence[int]) -> Iterable[Sequence[int]]:
    for start in range(0, len(values), _CHUNK):
        yield values[start : start + _CHUNK]
