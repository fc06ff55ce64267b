"""A job's whole story for its console page (docs/console.md "A job's story").

Enqueued by (``Job.origin``), claimed by (the lease owner, with the worker's host from
the worker registry), started, finished, duration, each failed attempt with its error
and worker, every operator action on it (the audit log), and one timeline of all of
it to the millisecond. Also which actions apply to the job now.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections

from ..core.limitspec import Limit
from ..models import AuditEntry, Job, JobStatus, LimitState, Worker
from ..storage_limits import in_flight, key_sql
from ..store import limits
from ..store.audit import entries_for_job
from ..store.pauses import paused_queues
from ..store.states import state_label

__all__ = [
    "Event",
    "actions_for",
    "attempts_of",
    "claimed_by",
    "origin_text",
    "timeline",
    "why_waiting",
]

#: ``lease_owner`` of a job claimed through the gateway: this mark, then the worker's
#: name (docs/gateway.md "Worker names").
GATEWAY_OWNER_MARK = "gateway:"

#: How far two clocks' readings of the same moment may differ in a timeline: the
#: database's, rounded to the millisecond, and this host's.
CLOCK_SLACK = timedelta(milliseconds=5)

#: Statuses a retried job reaches only by running again.
RAN_SINCE_RETRY = frozenset({JobStatus.PROCESSING, JobStatus.DONE, JobStatus.MAX_RETRY})


@dataclass(frozen=True)
class Event:
    """One line of a job's timeline."""

    #: When; None when the stored time is unreadable (listed first).
    at: datetime | None
    #: What happened, in words.
    what: str
    #: ``job``, ``attempt``, ``failed`` or ``operator``: the line's kind, for styling.
    kind: str = "job"


def actions_for(job: Job, now: datetime) -> list[str]:
    """Return the actions that apply to ``job`` at ``now``, among retry, cancel, delete.

    Retry: a dead letter, or a job scheduled for later (made due now). Cancel: a
    waiting job, or a running one not yet asked to stop. Delete: any job not
    running. A done job offers delete only.
    """
    actions = []
    if job.is_dead or (job.waiting and job.run_at > now):
        actions.append("retry")
    if job.waiting or (job.status == JobStatus.PROCESSING and not job.cancel_requested):
        actions.append("cancel")
    if job.status != JobStatus.PROCESSING:
        actions.append("delete")
    return actions


def origin_text(origin: str) -> str:
    """Return ``Job.origin`` in words: ``code: app.views.signup``, ``gateway token billing``."""
    if not origin:
        return "unknown (enqueued before origins were stored)"
    kind, _, name = origin.partition(":")
    words = {
        "code": "code",
        "gateway": "gateway token",
        "schedule": "schedule",
        "console": "console user",
        "admin": "admin user",
        "cli": "command line",
    }
    if kind in words and name:
        return f"{words[kind]} {name}"
    return origin


def claimed_by(job: Job) -> dict[str, str] | None:
    """Return the worker that holds or last ran ``job``: name, host and kind; None if none.

    ``lease_owner`` is ``host:pid:thread`` for a ``runworkers`` thread, or the
    gateway mark and a worker name; the host comes from the worker registry when the
    worker is still registered (one query by its unique name).
    """
    owner = job.lease_owner or ""
    if not owner:
        return None
    if owner.startswith(GATEWAY_OWNER_MARK):
        name = owner[len(GATEWAY_OWNER_MARK) :]
        row = Worker.objects.using(job._state.db).filter(name=name).only("host").first()
        return {"name": name, "host": row.host if row and row.host else "-", "kind": "gateway"}
    parts = owner.split(":")
    foreman = ":".join(parts[:2]) if len(parts) >= 2 else owner
    row = Worker.objects.using(job._state.db).filter(name=foreman).only("host").first()
    host = row.host if row and row.host else parts[0]
    return {"name": owner, "host": host, "kind": "runworkers"}


def _when(value: Any) -> datetime | None:
    """An attempt's ``at`` (ISO text in the errors list) as an aware datetime, if it is one."""
    if isinstance(value, datetime):
        return value
    try:
        when = datetime.fromisoformat(str(value))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def attempts_of(job: Job) -> list[dict[str, Any]]:
    """Return the failed attempts of ``job``, oldest first: the errors list with ``at``
    read as a datetime."""
    return [
        {**entry, "at_time": _when(entry.get("at"))}
        for entry in job.errors or []
        if isinstance(entry, dict)
    ]


def operator_actions(job: Job) -> list[AuditEntry]:
    """Return the audit rows that name ``job``, oldest first."""
    return entries_for_job(job._state.db or "default", job.jid, since=job.created_at)


def _action_words(entry: AuditEntry) -> str:
    who = f"{entry.source} {entry.actor}".strip()
    return f"{entry.action} by {who}"


def timeline(job: Job, audit: list[AuditEntry], now: datetime) -> list[Event]:
    """Return ``job``'s events in time order: created, failed attempts, operator actions,
    the current attempt's start, finished.

    The current attempt's start is shown only once an attempt has started (``attempt``
    1 or more): a retried job is back at attempt 0 and has not started yet.
    """
    origin = origin_text(job.origin)
    events = [Event(job.created_at, f"enqueued by {origin}")]
    for entry in attempts_of(job):
        what = f"attempt {entry.get('attempt')} failed: {entry.get('exception_class') or '-'}"
        if entry.get("worker"):
            what += f" (on {entry['worker']})"
        events.append(Event(entry["at_time"], what, "failed"))
    for row in audit:
        events.append(Event(row.at, _action_words(row), "operator"))
    earliest = datetime.min.replace(tzinfo=UTC)
    # A retry applies only to a job that is not running, and makes it wait: a job
    # running, done or dead now began its current attempt after every retry, and
    # ended after it began. The clocks cannot say so: the audit row's time is the
    # database's (in PostgreSQL, its transaction's start) and the start may be this
    # host's, so what happened orders these lines. Any other job (waiting again, or
    # ended without a run) is ordered by time, within :data:`CLOCK_SLACK`.
    retried = [row.at for row in audit if row.action == "retry" and row.count and row.at]
    last: list[tuple[datetime, int, Event]] = []
    if job.started_at and job.attempt >= 1:
        start = Event(job.started_at, f"attempt {job.attempt} started", "attempt")
        key = job.started_at
        if job.status in RAN_SINCE_RETRY:
            key = max([key, *retried])
        for at in retried:
            if key < at <= key + CLOCK_SLACK:
                key = at
        last.append((key, 1, start))
    if job.finished_at:
        end = Event(job.finished_at, f"finished: {state_label(job, now)}")
        last.append((max([job.finished_at, *(k for k, _r, _e in last)]), 2, end))
    ordered = [(e.at or earliest, 0, e) for e in events] + last
    return [e for _at, _rank, e in sorted(ordered, key=lambda item: (item[0], item[1]))]


def duration(job: Job) -> timedelta | None:
    """The last attempt's run time: finished minus started; None until both are set."""
    if job.started_at and job.finished_at and job.finished_at >= job.started_at:
        return job.finished_at - job.started_at
    return None


def _claim_key(using: str, limit: Limit, job: Job) -> str:
    """The key ``job`` counts under for the partitioned ``limit``, read by the claim's
    own SQL (:func:`~django_jobqueue.storage_limits.key_sql`), so it is the claim's key
    for every payload value (docs/limits.md "Partition keys"); one read."""
    if job.limit_key:
        return job.limit_key
    sql, params = key_sql(using, limit)
    table = connections[using].ops.quote_name(Job._meta.db_table)
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT {sql} FROM {table} WHERE id = %s", [*params, job.pk])  # noqa: S608
        row = cursor.fetchone()
    return "" if row is None or row[0] is None else str(row[0])


def why_waiting(job: Job, now: datetime) -> list[str]:
    """Say why a waiting ``job`` is not running, one sentence per reason (docs/limits.md
    "Visibility"): its ``run_at`` ahead, its queue paused, a limit at its concurrency or
    out of tokens (with the next possible start), else a free worker. Empty for a job
    that is not waiting."""
    if not job.waiting:
        return []
    using = job._state.db or "default"
    reasons = []
    if job.run_at > now:
        reasons.append(f"Scheduled: its run_at, {job.run_at:%Y-%m-%d %H:%M:%S} UTC, is ahead.")
    if job.queue in paused_queues(using, max_age_s=0):
        reasons.append(f"Its queue {job.queue} is paused.")
    view = limits.active(using, max_age_s=0)
    for target, limit in view.targets().items():
        kind, _sep, name = target.partition(":")
        if (job.job_type if kind == "type" else job.queue) != name:
            continue
        key = _claim_key(using, limit, job) if limit.partitioned else ""
        where = f"limit {target}" + (f", key {key!r}" if limit.partitioned else "")
        if limit.concurrency is not None:
            running = in_flight(using, target, limit, key)
            if running >= limit.concurrency:
                reasons.append(
                    f"Throttled by {where}: {running} of {limit.concurrency} in flight; it "
                    "can start when one of them ends."
                )
        if limit.rate is not None:
            state = LimitState.objects.using(using).filter(target=target, limit_key=key).first()
            if state is not None and state.refilled_at is not None:
                elapsed = max((now - state.refilled_at).total_seconds(), 0.0)
                tokens = min(float(limit.bucket), state.tokens + elapsed * limit.rate.per_s)
                if tokens < 1.0:
                    at = now + timedelta(seconds=(1.0 - tokens) / limit.rate.per_s)
                    reasons.append(
                        f"Throttled by {where}: rate {limit.rate} used up; next possible "
                        f"start {at:%Y-%m-%d %H:%M:%S} UTC."
                    )
    if not reasons:
        reasons.append("Due: waiting for a free worker.")
    return reasons
