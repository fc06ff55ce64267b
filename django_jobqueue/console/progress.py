"""The progress of running jobs as JSON, polled by the console's bars (docs/console.md
"Progress").

``GET progress/?jid=A&jid=B`` answers ``{"jobs": {jid: {"status", "state",
"progress"}}}`` for up to :data:`MAX_JIDS` jids, one indexed read by jid; the
console's ``progress.js`` asks every 2 s for the bars on the page and updates them
without a reload.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from ..models import Job
from ..store.states import state_label
from .access import staff_required
from .views import using

__all__ = ["MAX_JIDS", "progress"]

#: Jids one poll may ask for (a page of the job list holds 50).
MAX_JIDS = 200


@staff_required()
def progress(request: HttpRequest) -> JsonResponse:
    """Answer the status, state words and stored progress of the jobs asked for."""
    jids = [jid for jid in request.GET.getlist("jid")[:MAX_JIDS] if jid and len(jid) <= 64]
    now = timezone.now()
    rows = (
        Job.objects.using(using())
        .filter(jid__in=jids)
        .only("jid", "status", "waiting", "run_at", "progress")
    )
    jobs = {
        job.jid: {
            "status": job.status,
            "state": state_label(job, now),
            "progress": job.progress,
        }
        for job in rows
    }
    response = JsonResponse({"jobs": jobs})
    response["Cache-Control"] = "no-store"
    return response
