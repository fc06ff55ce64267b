"""Reading a workflow's graph back (for the gateway's ``GET /sdk/workflows/{id}`` and the
console's workflow page, docs/workflows.md "Where to see them").

A workflow's steps are its jobs (``Job.workflow``, ``Job.step``); its edges are the
:class:`~django_jobqueue.models.Dependency` rows whose dependent is one of them. Both
are read in two queries (one per 500 jobs for the edges), never one per step.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from ..models import Dependency, Job

__all__ = ["GraphStep", "MAX_STEPS", "workflow_graph"]

#: The most steps read for one workflow (a page or an answer stays bounded).
MAX_STEPS = 2_000
_CHUNK = 500


@dataclass
class GraphStep:
    """A step of a workflow as read: its job, the steps it waits for, and each edge's
    state (``pending``, ``done``, ``failed``) and policy."""

    job: Job
    after: list[str] = field(default_factory=list)
    edges: list[tuple[str, str, str]] = field(default_factory=list)  # (upstream, state, policy)

    @property
    def name(self) -> str:
        """The step's name (its job's ``step``; its jid if it has none)."""
        return self.job.step or self.job.jid


def workflow_graph(workflow_id: int, using: str, limit: int = MAX_STEPS) -> list[GraphStep]:
    """Return the steps of workflow ``workflow_id``, in creation order, with their edges.

    ``using``: the jobs' database alias. ``limit``: at most that many steps (the first
    created); an edge from a step past the limit is left out.
    """
    jobs = list(
        Job.objects.using(using)
        .filter(workflow_id=workflow_id)
        .order_by("pk")
        .defer("payload", "result", "errors")[:limit]
    )
    steps = {job.pk: GraphStep(job) for job in jobs}
    names = {pk: step.name for pk, step in steps.items()}
    upstream: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    pks = list(steps)
    for start in range(0, len(pks), _CHUNK):
        rows = (
            Dependency.objects.using(using)
            .filter(dependent_id__in=pks[start : start + _CHUNK])
            .order_by("pk")
            .values_list("dependent_id", "upstream_id", "state", "policy")
        )
        for dependent, up, state, policy in rows:
            upstream[dependent].append((up, state, policy))
    for pk, edges in upstream.items():
        for up, state, policy in edges:
            if up in names:
                steps[pk].after.append(names[up])
                steps[pk].edges.append((names[up], state, policy))
    return list(steps.values())
