"""Jobs and schedules, stored through the ORM (docs/design.md#plans).

The design's words (docs/design.md#glossary, which keeps the names of the Go queue
this one ports) map onto the fields once, here:

========================  ==========================================
design word              ``Job`` field
========================  ==========================================
``ID``                    ``jid`` (the public handle; ``id`` stays Django's pk)
``JobID`` / id            ``job_id`` (+ ``job_id_hash`` while the id is held)
``Title``                 ``job_type``
``Try``                   ``attempt`` (``try`` is a Python keyword)
``Payload``, ``Result``   ``payload``, ``result`` (JSON)
``Status``                ``status`` (:class:`JobStatus`)
``UpdatedAt``             ``updated_at``
========================  ==========================================

Holds. An id (docs/design.md#ids) or a unique key (docs/design.md#unique-keys) is *held* by the row
whose
``job_id_hash`` / ``unique_key_hash`` carries its SHA-256 (hex). A unique index over
(queue, hash) makes two holders impossible on every database; NULLs never collide,
so ending a hold is setting the hash to NULL. ``id_held_until`` and
``unique_expires_at`` bound a hold in time: a hold past them is stale and the
creation path clears it under its lock before inserting.

Creation is the managers' (:mod:`django_jobqueue.store.managers`): ``Job.objects`` creates
a job only under its advisory locks, and refuses Django's ``create()`` and
``bulk_create()``. State changes are guarded ``update()`` calls
(:mod:`django_jobqueue.storage`) that filter on the expected status and lease token
and check the row count.

The tables of batches and workflows (:mod:`django_jobqueue.store.flowmodels`) and of
job statistics (:mod:`django_jobqueue.store.statmodels`) are defined in the store and
imported here, where Django finds them and where they are imported from.
"""

from __future__ import annotations

import operator
from typing import Any

from django.db import models
from django.db.models.functions import Now  # db_default only: see dbclock
from django.utils.translation import gettext_lazy as _

from .core import dbclock
from .store import unique
from .store.flowmodels import Batch, Dependency, Workflow
from .store.managers import CreateRefusingQuerySet, JobManager, ScheduleJobManager, hold_hash
from .store.statmodels import (
    DURATION_BUCKETS_MS,
    PICKUP_BUCKETS_MS,
    JobStat,
    JobTotal,
    StatCounters,
)

__all__ = [
    "API_SCOPES",
    "AuditEntry",
    "Batch",
    "Dependency",
    "DEAD_STATUSES",
    "FINISHED_STATUSES",
    "WAITING_STATUSES",
    "ApiToken",
    "DURATION_BUCKETS_MS",
    "Job",
    "JobStat",
    "JobTotal",
    "JobStatus",
    "LimitOverride",
    "LimitState",
    "PICKUP_BUCKETS_MS",
    "QueuePause",
    "ScheduleJob",
    "StatCounters",
    "UniqueMode",
    "Worker",
    "Workflow",
    "hold_hash",
]


class JobStatus(models.TextChoices):
    """Stored job statuses (docs/design.md#states)."""

    #: Waiting to run; scheduled when ``run_at`` is in the future.
    INIT = "init", _("init")
    #: Claimed by a worker, running under a lease.
    PROCESSING = "processing", _("processing")
    #: An attempt failed; runs again at ``run_at``.
    RETRY = "retry", _("retry")
    #: Failed for good without retry (non-retryable, expired, unknown job type).
    ERROR = "error", _("error")
    #: Failed for good after its retries (dead letter).
    MAX_RETRY = "max_retry", _("max retry")
    #: Completed successfully.
    DONE = "done", _("done")
    #: A running job that was told to stop.
    CANCELLED = "cancelled", _("cancelled")
    #: Waiting for its upstream jobs (docs/workflows.md): ``waiting`` is false, so the
    #: claim never scans it; due (``init``) in the transaction of its last upstream's
    #: ``done``.
    BLOCKED = "blocked", _("blocked")


#: Statuses a worker may claim.
WAITING_STATUSES = (JobStatus.INIT, JobStatus.RETRY)
#: Dead letters: failed for good, kept for ``keep``.
DEAD_STATUSES = (JobStatus.ERROR, JobStatus.MAX_RETRY)
#: Statuses no worker will move out of on its own.
FINISHED_STATUSES = (*DEAD_STATUSES, JobStatus.DONE, JobStatus.CANCELLED)


class UniqueMode(models.TextChoices):
    """When a unique key's lock frees (docs/design.md#unique-keys); the TTL always bounds it."""

    #: Core: when ``unique_ttl_ms`` passes.
    WHILE_LOCKED = unique.WHILE_LOCKED, _("while locked")
    #: Pro: the moment a worker claims the job.
    UNTIL_EXECUTING = unique.UNTIL_EXECUTING, _("until executing")
    #: Pro: when the job completes successfully (not on dead letter).
    UNTIL_EXECUTED = unique.UNTIL_EXECUTED, _("until executed")


class JobQuerySet(CreateRefusingQuerySet["Job"]):
    """Query helpers named for states; ``create()`` and ``bulk_create()`` are refused."""

    def waiting(self) -> JobQuerySet:
        """Jobs in ``init`` or ``retry`` (due or scheduled)."""
        return self.filter(waiting=True)

    def due(self) -> JobQuerySet:
        """Waiting jobs whose ``run_at`` has come, by the database clock."""
        return self.filter(waiting=True, run_at__lte=dbclock.Now())

    def processing(self) -> JobQuerySet:
        """Jobs claimed by a worker."""
        return self.filter(status=JobStatus.PROCESSING)

    def lease_expired(self) -> JobQuerySet:
        """Claimed jobs whose lease has expired by the database clock."""
        return self.filter(status=JobStatus.PROCESSING, lease_expires_at__lt=dbclock.Now())

    def dead(self) -> JobQuerySet:
        """Dead letters: ``error`` and ``max_retry``."""
        return self.filter(status__in=DEAD_STATUSES)

    def done(self) -> JobQuerySet:
        """Jobs that completed successfully."""
        return self.filter(status=JobStatus.DONE)


class Job(models.Model):
    """One unit of work (docs/design.md#execution). See the module docstring for the field map."""

    jid = models.CharField(_("jid"), max_length=32, unique=True, editable=False)
    queue = models.CharField(_("queue"), max_length=100)
    job_type = models.CharField(_("job type"), max_length=200)
    job_id = models.CharField(_("id"), max_length=1024, null=True, blank=True)  # noqa: DJ001 (NULL: no hold)
    job_id_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001 (NULL: no hold)
    id_held_until = models.DateTimeField(null=True, blank=True)
    payload = models.JSONField(_("payload"), null=True)
    result = models.JSONField(_("result"), null=True, blank=True)
    message = models.TextField(_("message"), blank=True, default="")
    #: One entry per failed attempt: {"attempt", "exception_class", "message", "traceback", "at"}.
    errors = models.JSONField(_("errors"), default=list, blank=True)
    status = models.CharField(
        _("status"), max_length=16, choices=JobStatus.choices, default=JobStatus.INIT
    )
    #: True exactly while ``status`` is ``init`` or ``retry``: the leading column of
    #: the claim index, a portable stand-in for a partial index (MySQL has none).
    waiting = models.BooleanField(default=True, editable=False)
    priority = models.PositiveIntegerField(_("priority"), default=100)
    attempt = models.PositiveIntegerField(_("attempt"), default=0)
    max_retry = models.PositiveIntegerField(_("max retry"), default=3)
    timeout_ms = models.PositiveIntegerField(_("timeout (ms)"), default=300_000)
    secure = models.BooleanField(_("secure"), default=False)
    run_at = models.DateTimeField(_("run at"))
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    unique_key = models.CharField(_("unique key"), max_length=1024, null=True, blank=True)  # noqa: DJ001 (NULL: no hold)
    unique_key_hash = models.CharField(max_length=64, null=True, blank=True, editable=False)  # noqa: DJ001 (NULL: no hold)
    unique_mode = models.CharField(
        _("unique mode"), max_length=16, choices=UniqueMode.choices, blank=True, default=""
    )
    unique_expires_at = models.DateTimeField(_("unique lock expires at"), null=True, blank=True)
    lease_owner = models.CharField(_("lease owner"), max_length=200, blank=True, default="")
    lease_token = models.CharField(max_length=32, blank=True, default="", editable=False)
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True, blank=True)
    heartbeat_at = models.DateTimeField(_("heartbeat at"), null=True, blank=True)
    cancel_requested = models.BooleanField(_("cancel requested"), default=False)
    #: A running job's latest ``{"done", "total", "message"}``, stored with a heartbeat
    #: (docs/console.md "Progress"); NULL: none reported.
    progress = models.JSONField(_("progress"), null=True, blank=True)
    #: The handler's resumable steps (docs/workflows.md "Resumable steps"), in the order
    #: they first checkpointed: ``[{"name", "done", "cursor", "result"}, ...]``; NULL:
    #: none recorded. Written only by the lease holder, inside the step's transaction.
    steps = models.JSONField(_("steps"), null=True, blank=True)
    #: An id's ``set`` on a running job: one run more after this one, with this value.
    rerun = models.BooleanField(default=False)
    rerun_payload = models.JSONField(null=True, blank=True)
    rerun_at = models.DateTimeField(null=True, blank=True)
    #: The id options ``dedupe`` and ``keep`` given on a ``Queue(name, dedupe=, keep=)`` handle,
    #: stored at creation, in ms (``dedupe_ms`` 0: none); NULL: the job type's, else the
    #: queue's (``storage._id_hold_options``).
    dedupe_ms = models.PositiveBigIntegerField(null=True, blank=True, editable=False)
    keep_ms = models.PositiveBigIntegerField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(_("created at"), db_default=Now())
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    updated_at = models.DateTimeField(_("updated at"), db_default=Now())
    #: Who enqueued it (django_jobqueue.core.origin): ``code:<module>.<function>``,
    #: ``gateway:<token>``, ``schedule:<plan>``; "" for jobs made before it was stored.
    origin = models.CharField(
        _("enqueued by"), max_length=200, blank=True, default="", db_default=""
    )
    #: The batch and the workflow it belongs to (docs/workflows.md), and its step name
    #: in that workflow; NULL and "": none. A job with neither pays nothing for them.
    batch = models.ForeignKey(
        Batch,
        verbose_name=_("batch"),
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # migration 0020's index, partial where the database allows
        related_name="jobs",
        editable=False,
    )
    workflow = models.ForeignKey(
        Workflow,
        verbose_name=_("workflow"),
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # migration 0020's index, partial where the database allows
        related_name="jobs",
        editable=False,
    )
    step = models.CharField(_("step"), max_length=200, blank=True, default="", db_default="")
    #: Another job waits for this one's end (a ``Dependency`` names it upstream). Set,
    #: with the upstream row locked, by the enqueue of a dependent; a job's end write
    #: whose copy says False is guarded by ``awaited = false``, so an edge added
    #: while it ran is never missed (:mod:`django_jobqueue.flows.endings`).
    awaited = models.BooleanField(_("awaited"), default=False, db_default=False, editable=False)
    #: The key a partitioned limit counts this job under (docs/limits.md): the
    #: ``limit_key=`` given at enqueue, else the partition's value of the payload
    #: then; "" for a job of no partitioned limit.
    limit_key = models.CharField(
        _("limit key"), max_length=200, blank=True, default="", db_default=""
    )

    objects = JobManager.from_queryset(JobQuerySet)()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        indexes = [
            # Claims of named queues, and claims of every queue (runworkers' default):
            # both walk an index in claim order, neither sorts the waiting jobs.
            models.Index(
                fields=["waiting", "queue", "priority", "run_at", "id"], name="jq_job_claim_idx"
            ),
            models.Index(
                fields=["waiting", "priority", "run_at", "id"], name="jq_job_claim_any_idx"
            ),
            models.Index(fields=["status", "lease_expires_at"], name="jq_job_lease_idx"),
            models.Index(fields=["status", "finished_at"], name="jq_job_finished_idx"),
            models.Index(fields=["queue", "status", "finished_at"], name="jq_job_queue_idx"),
            models.Index(fields=["job_type", "status"], name="jq_job_type_idx"),
            # A plan's run history (schedules.plan_history): its jobs, newest first.
            models.Index(fields=["origin", "created_at"], name="jq_job_origin_idx"),
        ]
        permissions = [
            ("retry_job", _("Can retry jobs")),
            ("cancel_job", _("Can cancel jobs")),
            ("pause_queue", _("Can pause and resume queues")),
        ]
        constraints = [
            models.UniqueConstraint(fields=["queue", "job_id_hash"], name="jq_job_id_uniq"),
            models.UniqueConstraint(fields=["queue", "unique_key_hash"], name="jq_job_ukey_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.jid} ({self.status})"

    # The primary key, read as ``id`` without ``Model._get_pk_val``'s look-up of the
    # meta's pk field on each read: a worker reads a job's pk several times per job
    # (the completer's ids, its slot, its outcome), 3% of a no-op job's worker time.
    pk = property(operator.attrgetter("id"), lambda self, value: setattr(self, "id", value))

    @property
    def is_dead(self) -> bool:
        """Whether the job is a dead letter (``error`` or ``max_retry``)."""
        return self.status in DEAD_STATUSES

    def shown_payload(self) -> Any:
        """Return the payload for display: hidden when the job type is ``secure``."""
        return "<secure>" if self.secure else self.payload

    def shown_result(self) -> Any:
        """Return the result for display: hidden when the job type is ``secure``."""
        return "<secure>" if self.secure else self.result


class ScheduleJob(models.Model):
    """A plan that makes jobs: once at a time, or on a cron expression (docs/design.md#plans).

    In the design's words (docs/design.md#plans), ``JobID`` is ``name`` (unique), ``Title`` is
    ``job_type``,
    ``Schedule`` is ``schedule_at`` (the next run, UTC), ``ExecuteID`` is
    ``execute_id`` (the jid of the last job made) and ``Log`` is ``log`` (the last
    outcomes, newest last).
    """

    name = models.CharField(_("name"), max_length=200, unique=True)
    queue = models.CharField(_("queue"), max_length=100)
    job_type = models.CharField(_("job type"), max_length=200)
    payload = models.JSONField(_("payload"), null=True, blank=True)
    priority = models.PositiveIntegerField(_("priority"), default=100)
    status = models.CharField(_("status"), max_length=16, default="active")
    cron = models.CharField(_("cron"), max_length=200, blank=True, default="")
    timezone = models.CharField(_("time zone"), max_length=64, default="UTC")
    enabled = models.BooleanField(_("enabled"), default=True)
    catch_up = models.BooleanField(_("catch up"), default=False)
    schedule_at = models.DateTimeField(_("next run at"), null=True, blank=True)
    execute_id = models.CharField(_("last job"), max_length=32, blank=True, default="")
    log = models.JSONField(_("log"), default=list, blank=True)
    #: Who owns the plan (schedules.ScheduleSource): "code" and "settings" plans are
    #: synced (and retired) on foreman start; "api" and "manual" ones never are.
    source = models.CharField(_("source"), max_length=16, default="manual")
    last_run_at = models.DateTimeField(_("last run at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), db_default=Now())
    updated_at = models.DateTimeField(_("updated at"), db_default=Now())

    objects = ScheduleJobManager()

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        indexes = [models.Index(fields=["enabled", "schedule_at"], name="jq_sched_due_idx")]
        permissions = [("manage_schedule", _("Can enable, disable and run schedules"))]

    def __str__(self) -> str:
        return self.name


#: What an :class:`ApiToken` may do on the HTTP gateway: enqueue and use ids
#: (``produce``), run jobs (``work``), read jobs (``read``), and everything, retries
#: and the Pro routes included (``admin``).
API_SCOPES = ("produce", "work", "read", "admin")


class ApiToken(models.Model):
    """A bearer token of the HTTP SDK gateway (``django_jobqueue.gateway``).

    Only a SHA-256 of the secret is stored; the secret is shown once, when the token
    is made (:func:`django_jobqueue.store.apitokens.issue_token`). ``prefix`` (the secret's
    first characters, not secret on its own) finds the row; the hash is then compared
    in constant time. ``queues`` holds exact queue names and ``prefix*`` patterns
    (``["*"]``: every queue); ``scopes`` a subset of :data:`API_SCOPES`.
    """

    name = models.CharField(_("name"), max_length=200)
    prefix = models.CharField(_("prefix"), max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    queues = models.JSONField(_("allowed queues"), default=list, blank=True)
    scopes = models.JSONField(_("scopes"), default=list, blank=True)
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True)
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True)
    #: Written at most once a minute, so a busy token costs no write per request.
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True)
    created_at = models.DateTimeField(_("created at"), db_default=Now())

    class Meta:
        verbose_name = _("API token")
        verbose_name_plural = _("API tokens")

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}...)"

    @property
    def revoked(self) -> bool:
        """Whether the token was revoked."""
        return self.revoked_at is not None


class Worker(models.Model):
    """A live or recently seen worker process: a ``runworkers`` foreman or a gateway
    worker in any language (its registration, shown by the console).

    ``name`` is unique: ``host:pid`` for a foreman, the name a gateway worker
    registers with. ``last_seen_at`` is refreshed by heartbeats and claims; a worker
    unseen for three heartbeats counts as gone and is pruned later.
    """

    name = models.CharField(_("name"), max_length=200, unique=True)
    #: ``runworkers`` or ``gateway``.
    kind = models.CharField(_("kind"), max_length=16, default="runworkers")
    host = models.CharField(_("host"), max_length=255, blank=True, default="")
    pid = models.PositiveIntegerField(_("pid"), null=True, blank=True)
    #: Queues it claims from; empty: every queue.
    queues = models.JSONField(_("queues"), default=list, blank=True)
    #: Job types it runs; empty: any job type of its queues.
    job_types = models.JSONField(_("job types"), default=list, blank=True)
    #: Languages of a gateway worker, such as ``["typescript"]``.
    languages = models.JSONField(_("languages"), default=list, blank=True)
    concurrency = models.PositiveIntegerField(_("concurrency"), default=1)
    version = models.CharField(_("version"), max_length=64, blank=True, default="")
    started_at = models.DateTimeField(_("started at"), db_default=Now())
    last_seen_at = models.DateTimeField(_("last seen at"), db_default=Now())
    #: Slots running a job at the last heartbeat.
    busy = models.PositiveIntegerField(_("busy slots"), default=0)
    #: Jobs done and failed since it started.
    done = models.PositiveBigIntegerField(_("jobs done"), default=0)
    failed = models.PositiveBigIntegerField(_("jobs failed"), default=0)
    #: When it stopped cleanly (its last beat); a stopped worker is gone at once.
    stopped_at = models.DateTimeField(_("stopped at"), null=True, blank=True)
    #: The gateway token that registered it: the name is that token's (docs/gateway.md
    #: "Worker names"). None: a ``runworkers`` foreman, or its token was deleted.
    owner_token = models.ForeignKey(
        "ApiToken",
        verbose_name=_("registered by token"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        verbose_name = _("worker")
        verbose_name_plural = _("workers")
        indexes = [models.Index(fields=["last_seen_at"], name="jq_worker_seen_idx")]

    def __str__(self) -> str:
        return self.name


class QueuePause(models.Model):
    """A paused queue: workers claim none of its jobs while the row exists.
    Enqueueing into it still works."""

    queue = models.CharField(_("queue"), max_length=100, unique=True)
    paused_at = models.DateTimeField(_("paused at"), db_default=Now())
    #: Who paused it: a user name, ``cli`` or a gateway token's name.
    paused_by = models.CharField(_("paused by"), max_length=200, blank=True, default="")

    class Meta:
        verbose_name = _("paused queue")
        verbose_name_plural = _("paused queues")

    def __str__(self) -> str:
        return self.queue


class AuditEntry(models.Model):
    """One operator action: who, when, what, on how many, from where (docs/console.md
    "Audit log").

    Written by :func:`django_jobqueue.store.audit.record` in the transaction of the
    action it records, from the console, the admin, ``manage.py jobqueue`` and the
    gateway. ``jids`` lists the jobs acted on (comma-separated, at most
    ``audit.MAX_JIDS`` of them) so a job's page finds its own actions; rows older
    than ``JOBQUEUE["AUDIT_KEEP"]`` are pruned by ``jobqueue prune``.
    """

    at = models.DateTimeField(_("at"), db_default=Now())
    #: ``console``, ``admin``, ``cli`` or ``gateway``.
    source = models.CharField(_("from"), max_length=16)
    #: A user name, the operating-system user of the CLI, or a gateway token's name.
    actor = models.CharField(_("who"), max_length=200, blank=True, default="")
    #: A verb: retry, cancel, delete, pause, resume, prune, release, enable, disable,
    #: run, token_create, token_revoke, token_delete.
    action = models.CharField(_("action"), max_length=32)
    #: What was acted on, in words: "job <jid>", "queue emails", "12 jobs".
    target = models.CharField(_("what"), max_length=300, blank=True, default="")
    #: How many rows it changed.
    count = models.PositiveIntegerField(_("how many"), default=0)
    #: The counts behind ``count`` (e.g. {"failed": 2, "waiting": 1}).
    detail = models.JSONField(_("detail"), default=dict, blank=True)
    jids = models.TextField(_("jobs"), blank=True, default="")

    class Meta:
        verbose_name = _("audit entry")
        verbose_name_plural = _("audit log")
        indexes = [models.Index(fields=["at"], name="jq_audit_at_idx")]

    def __str__(self) -> str:
        return f"{self.source}:{self.actor} {self.action} {self.target}"


class LimitOverride(models.Model):
    """A flow-control limit set at run time (docs/limits.md): it replaces the declared
    limit of its target (``@job(limits=)``, ``JOB_TYPES``, ``QUEUES``) until the row is
    deleted (``jobqueue limits clear``). Every process re-reads the rows within a second.

    ``target`` is ``type:<job type>`` or ``queue:<queue>``. A row with neither a
    concurrency nor a rate lifts the declared limit.
    """

    target = models.CharField(_("target"), max_length=210, unique=True)
    concurrency = models.PositiveIntegerField(_("concurrency"), null=True, blank=True)
    #: ``"N/s"``, ``"N/m"``, ``"N/h"``; "": none.
    rate = models.CharField(_("rate"), max_length=32, blank=True, default="")
    burst = models.PositiveIntegerField(_("burst"), null=True, blank=True)
    #: ``"payload.<field>"``, ``"key"``; "": none (one global limit).
    partition = models.CharField(_("partition"), max_length=200, blank=True, default="")
    fair = models.BooleanField(_("fair"), default=False)
    #: Who set it: a user name, ``cli`` or a gateway token's name.
    set_by = models.CharField(_("set by"), max_length=200, blank=True, default="")
    updated_at = models.DateTimeField(_("updated at"), db_default=Now())

    class Meta:
        verbose_name = _("limit override")
        verbose_name_plural = _("limit overrides")

    def __str__(self) -> str:
        return self.target


class LimitState(models.Model):
    """The lock and the token bucket of one (limit target, key) (docs/limits.md).

    A limited claim locks the rows of the (target, key) pairs it claims for
    (PostgreSQL: ``INSERT ... ON CONFLICT DO UPDATE ... WHERE false``, which makes a
    missing row and locks it; MariaDB: ``SELECT ... FOR UPDATE``; SQLite's write
    transaction), counts the ``processing``
    jobs of each, and takes tokens here: no counter of running jobs is kept, so a job
    that ends, is handed back or is reaped frees its slot by leaving ``processing``.
    ``limit_key`` is "" for a limit without a partition. Rows untouched for an hour
    (a full bucket: they hold nothing) are deleted by ``jobqueue limits prune``.
    """

    target = models.CharField(_("target"), max_length=210)
    limit_key = models.CharField(_("limit key"), max_length=200, blank=True, default="")
    #: Tokens in the bucket at ``refilled_at`` (a rate's; unused without one).
    tokens = models.FloatField(_("tokens"), default=0.0)
    refilled_at = models.DateTimeField(_("refilled at"), null=True, blank=True)

    class Meta:
        verbose_name = _("limit state")
        verbose_name_plural = _("limit states")
        constraints = [
            models.UniqueConstraint(fields=["target", "limit_key"], name="jq_limit_state_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.target} {self.limit_key!r}"
