"""What the console pages read, each query bounded on a big job table.

No full-table count: waiting and scheduled jobs are counted over the claim index
(``waiting`` leads it), running ones and dead letters over the partial indexes of
their rows (PostgreSQL; the status indexes elsewhere); finished work comes from
:class:`~django_jobqueue.models.JobStat`.
Filters and sorts from the URL go through :class:`JobFilter`, a form whose choices
are the only values that reach a query.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from django import forms
from django.db.models import Q, QuerySet, Sum

from ..core.conf import get_config
from ..core.dbclock import Now
from ..models import Job, JobStat, JobStatus
from ..overview import QueueRow, jobs_database, overview
from ..store import states
from ..store.jobfilter import FilterError, parse_filter
from ..store.pauses import paused_queues
from ..store.registry import registered_job_types

__all__ = [
    "PAGE_SIZE",
    "STATES",
    "STATE_ALIASES",
    "JobFilter",
    "known_job_types",
    "known_queues",
    "state_choices",
    "QueueRow",
    "chart_series",
    "dedupe_series",
    "filtered_jobs",
    "job_page",
    "overview",
]

logger = logging.getLogger(__name__)

#: Jobs per page of the jobs list (and the most a Core selection action takes).
PAGE_SIZE = 50

#: The state filter's values and what each selects: the state words
#: (docs/design.md#states), then each stored status on its own (``status:retry``).
STATES: dict[str, Q] = {
    **{word: states.state_filter(word) for word in states.STATES},
    **{f"status:{status}": states.status_filter(status) for status in JobStatus.values},
}
#: Other names of a state the filter still takes (older links): the console's
#: former ``dead`` and ``retrying``.
STATE_ALIASES = {"dead": states.FAILED, "retrying": f"status:{JobStatus.RETRY}"}
#: The latest jobs whose queues and job types the filters offer, besides the known ones.
FILTER_SAMPLE_ROWS = 2_000


def state_choices() -> list[Any]:
    """The state filter's choices: the state words, then the stored statuses, grouped."""
    words = []
    for word in states.STATES:
        stored = [s for s, w in states.STATE_OF_STATUS.items() if w == word]
        if word == states.SCHEDULED:
            stored = [JobStatus.INIT, JobStatus.RETRY]
        label = states.status_label(word, ", ".join(stored)) if stored != [word] else word
        words.append((word, label))
    return [
        ("", "any state"),
        ("State", words),
        ("Stored status", [(f"status:{status}", status) for status in JobStatus.values]),
    ]


def known_queues(using: str) -> list[str]:
    """Return the queues worth offering: configured, of job types, paused, in the stats
    of the last day, and of the latest jobs (bounded reads, no table scan)."""
    config = get_config()
    names = {config.DEFAULT_QUEUE, *config.QUEUES}
    names.update(desc.queue for desc in _job_types().values() if desc.queue)
    names.update(paused_queues(using))
    names.update(_recent(using, "queue"))
    return sorted(name for name in names if name)


def known_job_types(using: str) -> list[str]:
    """Return the job types worth offering: registered, declared, in the stats of the
    last day, and of the latest jobs."""
    names = set(_job_types())
    names.update(_recent(using, "job_type"))
    return sorted(name for name in names if name)


def _job_types() -> dict[str, Any]:
    try:
        return registered_job_types()
    except Exception:  # noqa: BLE001 (a broken declaration must not break the console)
        logger.warning("job types could not be listed for the console filter", exc_info=True)
        return {}


def _recent(using: str, field: str) -> set[str]:
    latest = Job.objects.using(using).order_by("-pk").values_list(field, flat=True)
    stats = (
        JobStat.objects.using(using)
        .filter(minute__gte=Now() - timedelta(days=1))
        .order_by()
        .values_list(field, flat=True)
        .distinct()
    )
    return set(latest[:FILTER_SAMPLE_ROWS]) | set(stats[:1_000])


def chart_series(
    using: str, *, hours: int, step_minutes: int, now: datetime | None = None
) -> tuple[list[str], dict[str, list[int]]]:
    """Return labels and the finished attempts per ``step_minutes`` over the last ``hours``.

    ``step_minutes`` divides an hour (1 or 60); labels are UTC ``HH:MM``. The
    series, one value per label: ``done``, ``retried`` (failed, another attempt
    comes) and ``failed`` (failed into a dead letter), every worker's
    (docs/metrics.md).
    """
    now = (now or datetime.now(UTC)).replace(second=0, microsecond=0)
    steps = hours * 60 // step_minutes
    start = now - timedelta(minutes=step_minutes * (steps - 1))
    start = start.replace(minute=start.minute - start.minute % step_minutes)
    series = {name: [0] * steps for name in ("done", "retried", "failed")}
    stats = (
        JobStat.objects.using(using)
        .filter(minute__gte=start)
        .order_by()
        .values_list("minute")
        .annotate(done=Sum("done"), retried=Sum("retried"), failed=Sum("failed"))
    )
    for minute, done, retried, failed in stats:
        index = int((minute - start).total_seconds() // 60) // step_minutes
        if 0 <= index < steps:
            series["done"][index] += done or 0
            series["retried"][index] += retried or 0
            series["failed"][index] += failed or 0
    fmt = "%H:%M"
    labels = [(start + timedelta(minutes=step_minutes * i)).strftime(fmt) for i in range(steps)]
    return labels, series


def dedupe_series(
    using: str, *, now: datetime | None = None
) -> tuple[list[str], list[tuple[str, str, list[int]]]]:
    """Return hourly deduplicated counts over the last day per (queue, job type)."""
    now = (now or datetime.now(UTC)).replace(minute=0, second=0, microsecond=0)
    start = now - timedelta(hours=23)
    per_key: dict[tuple[str, str], list[int]] = {}
    stats = (
        JobStat.objects.using(using)
        .filter(minute__gte=start, deduplicated__gt=0)
        .values_list("minute", "queue", "job_type")
        .annotate(n=Sum("deduplicated"))
    )
    for minute, queue, job_type, number in stats:
        index = int((minute - start).total_seconds() // 3600)
        if 0 <= index < 24:
            per_key.setdefault((queue, job_type), [0] * 24)[index] += number
    labels = [(start + timedelta(hours=i)).strftime("%H:%M") for i in range(24)]
    return labels, [(q, t, values) for (q, t), values in sorted(per_key.items())]


class JobFilter(forms.Form):
    """The jobs list's filters, search and cursor; only valid values reach a query.

    Queue, job type and state are choices: the known ones (:func:`known_queues`,
    :func:`known_job_types`, :func:`state_choices`), plus the value asked for, so a
    link to a queue not listed still filters.
    """

    state = forms.ChoiceField(required=False, choices=state_choices)
    queue = forms.ChoiceField(required=False)
    job_type = forms.ChoiceField(required=False, label="Job type")
    since = forms.DateTimeField(required=False, help_text="created at or after")
    until = forms.DateTimeField(required=False, help_text="created before")
    q = forms.CharField(
        required=False,
        max_length=2000,
        label="search",
        help_text="jid, id or terms: queue:mail state:failed payload.customer_id:42 "
        'error:"timed out" since:2h (docs/console.md "Search syntax")',
    )
    sort = forms.ChoiceField(
        required=False, choices=[("-id", "newest first"), ("id", "oldest first")]
    )
    after = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)

    #: See :data:`STATE_ALIASES`.
    STATE_ALIASES = STATE_ALIASES

    def clean_q(self) -> str:
        """Check the search against the filter language; a bad term is a form error."""
        text = str(self.cleaned_data.get("q") or "").strip()
        try:
            parse_filter(text)
        except FilterError as exc:
            raise forms.ValidationError(str(exc), code=exc.code) from exc
        return text

    def __init__(
        self, data: Any = None, *args: Any, using: str | None = None, **kwargs: Any
    ) -> None:
        if data is not None and data.get("state") in self.STATE_ALIASES:
            data = data.copy()
            data["state"] = self.STATE_ALIASES[data["state"]]
        super().__init__(data, *args, **kwargs)
        alias = using or jobs_database()
        for name, known in (("queue", known_queues), ("job_type", known_job_types)):
            values = set(known(alias))
            asked = data.get(name) if data is not None else None
            if isinstance(asked, str) and asked and len(asked) <= 200:
                values.add(asked)
            field = self.fields[name]
            assert isinstance(field, forms.ChoiceField)
            field.choices = [
                ("", f"any {field.label or name}".lower()),
                *((v, v) for v in sorted(values)),
            ]


def filtered_jobs(using: str, data: dict[str, Any]) -> QuerySet[Job]:
    """Return the jobs that a valid :class:`JobFilter`'s ``cleaned_data`` selects."""
    jobs = Job.objects.using(using).all()
    if data.get("state"):
        jobs = jobs.filter(STATES[data["state"]])
    if data.get("queue"):
        jobs = jobs.filter(queue=data["queue"])
    if data.get("job_type"):
        jobs = jobs.filter(job_type=data["job_type"])
    if data.get("since"):
        jobs = jobs.filter(created_at__gte=data["since"])
    if data.get("until"):
        jobs = jobs.filter(created_at__lt=data["until"])
    if data.get("q"):
        jobs = parse_filter(data["q"]).apply(jobs)  # type: ignore[assignment]
    return jobs


def job_page(jobs: QuerySet[Job], data: dict[str, Any]) -> tuple[list[Job], int | None]:
    """Return one page of ``jobs`` after the cursor, and the next cursor (None: last).

    Keyset pagination on the primary key: never OFFSET, so page 1,000 costs what
    page 1 does.
    """
    ascending = data.get("sort") == "id"
    after = data.get("after")
    if after:
        jobs = jobs.filter(pk__gt=after) if ascending else jobs.filter(pk__lt=after)
    page = list(
        jobs.order_by("pk" if ascending else "-pk").defer("payload", "result", "errors")[
            : PAGE_SIZE + 1
        ]
    )
    next_cursor = page[PAGE_SIZE - 1].pk if len(page) > PAGE_SIZE else None
    return page[:PAGE_SIZE], next_cursor
