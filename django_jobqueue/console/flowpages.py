"""The console's batch and workflow pages (docs/console.md "Batches and workflows").

A batch's page: its counts, a progress bar (jobs ended of its total), its callbacks
with their jobs, and its jobs (the first :data:`PAGE` by creation, each a link). A
workflow's page: its counts, its graph as server-rendered SVG
(:mod:`.flowgraph`), each node coloured by its job's state and linking to the job,
and its steps as a table. Both are read-only; a step is retried from its job's page,
which resumes the workflow (docs/workflows.md "Retrying a failed step").
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from ..flows.reading import MAX_STEPS, GraphStep, workflow_graph
from ..models import Batch, Job, Workflow
from ..store.states import state_word
from .access import staff_required
from .flowgraph import STATE_COLOURS, workflow_svg
from .views import context, using

__all__ = ["PAGE", "batch_detail", "workflow_detail"]

#: Jobs listed on a batch's page.
PAGE = 200
_MAX_ID = 2**63 - 1


def _job_url(jid: str) -> str:
    return reverse("django_jobqueue_console:job", args=[jid])


def _callbacks(row: Batch, alias: str) -> list[dict[str, Any]]:
    made = {
        "on_failure": row.failure_jid,
        "on_success": row.success_jid,
        "on_finish": row.finish_jid,
    }
    jobs = {
        job.jid: job
        for job in Job.objects.using(alias)
        .filter(jid__in=[jid for jid in made.values() if jid])
        .defer("payload", "result", "errors")
    }
    now = timezone.now()
    callbacks = []
    for kind, jid in made.items():
        spec = getattr(row, kind)
        if not isinstance(spec, dict):
            continue
        job = jobs.get(jid)
        callbacks.append(
            {
                "kind": kind,
                "job_type": spec.get("job_type", ""),
                "jid": jid,
                "state": state_word(job, now) if job is not None else "",
            }
        )
    return callbacks


@staff_required()
def batch_detail(request: HttpRequest, batch_id: int) -> HttpResponse:
    """Show a batch: counts, progress, callbacks, and its first :data:`PAGE` jobs."""
    alias = using()
    row = Batch.objects.using(alias).filter(pk=batch_id).first() if batch_id <= _MAX_ID else None
    if row is None:
        raise Http404("No such batch.")
    jobs = list(
        Job.objects.using(alias)
        .filter(batch_id=row.pk)
        .order_by("pk")
        .defer("payload", "result", "errors")[:PAGE]
    )
    ended = row.done + row.failed + row.cancelled
    return render(
        request,
        "django_jobqueue/console/batch.html",
        context(
            request,
            f"Batch {row.pk}",
            batch=row,
            ended=ended,
            percent=round(100 * ended / row.total) if row.total else 100,
            callbacks=_callbacks(row, alias),
            jobs=jobs,
            more=max(row.total - len(jobs), 0),
            page=PAGE,
        ),
    )


@staff_required()
def workflow_detail(request: HttpRequest, workflow_id: int) -> HttpResponse:
    """Show a workflow: counts, its graph (SVG, a node per step linking to its job),
    and its steps."""
    alias = using()
    row = None
    if workflow_id <= _MAX_ID:
        row = Workflow.objects.using(alias).filter(pk=workflow_id).first()
    if row is None:
        raise Http404("No such workflow.")
    steps = workflow_graph(row.pk, alias)
    now = timezone.now()

    def state_of(step: GraphStep) -> str:
        return state_word(step.job, now)

    ended = row.done + row.failed + row.cancelled
    return render(
        request,
        "django_jobqueue/console/workflow.html",
        context(
            request,
            f"Workflow {row.name} ({row.pk})",
            workflow=row,
            ended=ended,
            graph=workflow_svg(steps, state_of, _job_url),
            steps=[(step, state_of(step)) for step in steps],
            truncated=len(steps) >= MAX_STEPS,
            legend=list(STATE_COLOURS.items()),
        ),
    )
