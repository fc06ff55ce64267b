"""The tables of batches and workflows (docs/workflows.md): Batch, Workflow, Dependency.

A job belongs to at most one batch and at most one workflow (``Job.batch``,
``Job.workflow``); a workflow's job carries its step name (``Job.step``). A job
that waits for other jobs (``enqueue_job(..., after=[...])``, a workflow's step with
``after``) is stored ``blocked`` with ``waiting`` false: the claim scans only
``waiting`` rows, so a blocked job costs it nothing. Each (upstream, dependent)
pair is a :class:`Dependency` row whose ``state`` ends ``pending`` in the
transaction of the upstream job's end (:mod:`django_jobqueue.flows.endings`).

Counts (:class:`Tally`) change only in the transaction of the job's state change
that they count, by an ``UPDATE ... SET done = done + n``; the end of a batch or a
workflow is decided by a guarded update (``finished_at IS NULL`` and every job
counted) that one transaction alone wins, and the callbacks are enqueued by that
transaction. The ``*_jid`` columns record each callback made, so a callback is
made once whoever looks again (the repair pass of the worker's housekeeping).

Relations to jobs have no database constraint and ``DO_NOTHING`` on delete: a
prune of jobs stays a fast delete (no cascade collected in Python, no lock on a
batch row taken by each job's insert on MySQL).

This module is imported by :mod:`django_jobqueue.models`, where Django finds them.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now  # db_default only: see dbclock
from django.utils.translation import gettext_lazy as _

__all__ = [
    "Batch",
    "CALLBACK_KINDS",
    "Dependency",
    "EDGE_DONE",
    "EDGE_FAILED",
    "EDGE_PENDING",
    "POLICIES",
    "POLICY_CANCEL",
    "POLICY_IGNORE",
    "POLICY_SKIP",
    "Tally",
    "Workflow",
]

#: What a dependent does when an upstream job dies or is cancelled
#: (docs/workflows.md "When an upstream job fails"): ``cancel`` ends it ``cancelled``
#: with the reason, and so on down the graph; ``skip`` ends it ``done`` unrun, with
#: no result, so its own dependents go on; ``ignore`` runs it anyway.
POLICY_CANCEL, POLICY_SKIP, POLICY_IGNORE = "cancel", "skip", "ignore"
POLICIES = (POLICY_CANCEL, POLICY_SKIP, POLICY_IGNORE)

#: A :class:`Dependency`'s states: its upstream job has not ended yet; ended done;
#: ended dead or cancelled (the edge's policy then applied).
EDGE_PENDING, EDGE_DONE, EDGE_FAILED = "pending", "done", "failed"

#: The callbacks of a batch, in the order they are made when several fire at once.
CALLBACK_KINDS = ("on_failure", "on_success", "on_finish")


class Tally(models.Model):
    """The counts of a batch or a workflow: how many of its jobs ended, and how.

    ``total`` grows as jobs are added; ``done``, ``failed`` (dead letters) and
    ``cancelled`` grow in the transaction of each job's end. Pending is
    ``total - done - failed - cancelled``. ``finished_at`` is set, once, by the
    transaction that counts the last job (and, for a batch, after it was sealed).
    """

    total = models.PositiveIntegerField(_("total"), default=0)
    done = models.PositiveIntegerField(_("done"), default=0)
    failed = models.PositiveIntegerField(_("failed"), default=0)
    cancelled = models.PositiveIntegerField(_("cancelled"), default=0)
    created_at = models.DateTimeField(_("created at"), db_default=Now())
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)

    class Meta:
        abstract = True

    @property
    def pending(self) -> int:
        """Jobs not ended yet (waiting, blocked, running or retrying)."""
        return max(self.total - self.done - self.failed - self.cancelled, 0)

    def counts(self) -> dict[str, int]:
        """Return ``{"total", "done", "failed", "cancelled", "pending"}``."""
        return {
            "total": self.total,
            "done": self.done,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "pending": self.pending,
        }


class Batch(Tally):
    """A group of jobs with callbacks (docs/workflows.md "Batches").

    A callback is stored as ``{"job_type", "payload", "options"}`` (``options``: the
    enqueue options of :func:`~django_jobqueue.enqueue.enqueue_job` and ``queue``),
    or NULL. ``queue`` is the callbacks' queue when a callback names none ("": the
    callback job type's own). ``sealed`` is set when the ``with batch()`` block
    ends: a batch finishes only once sealed and every job counted, so a job that
    ends while the block still adds jobs does not finish it. A batch stays open to
    its own jobs after that (``ctx.batch.enqueue``): a running job is not counted,
    so the batch cannot finish under it.
    """

    queue = models.CharField(_("callbacks' queue"), max_length=100, blank=True, default="")
    on_finish = models.JSONField(_("on finish"), null=True, blank=True)
    on_success = models.JSONField(_("on success"), null=True, blank=True)
    on_failure = models.JSONField(_("on failure"), null=True, blank=True)
    sealed = models.BooleanField(_("sealed"), default=False)
    #: The jid of each callback made; "" until it is. Set by a guarded update
    #: (``WHERE <kind>_jid = ''``) in the transaction that enqueues the callback.
    finish_jid = models.CharField(_("on finish job"), max_length=32, blank=True, default="")
    success_jid = models.CharField(_("on success job"), max_length=32, blank=True, default="")
    failure_jid = models.CharField(_("on failure job"), max_length=32, blank=True, default="")

    class Meta:
        verbose_name = _("batch")
        verbose_name_plural = _("batches")
        indexes = [
            # The repair pass: sealed batches not finished, and recently finished ones.
            models.Index(fields=["finished_at", "sealed"], name="jq_batch_open_idx"),
        ]

    def __str__(self) -> str:
        return f"batch {self.pk} ({self.done + self.failed + self.cancelled}/{self.total})"


class Workflow(Tally):
    """A graph of jobs (docs/workflows.md "Workflows"): steps and their dependencies.

    ``name`` is the builder's (``Workflow("nightly-import")``); ``on_upstream_failure``
    is the default policy of its edges (:data:`POLICIES`).
    """

    name = models.CharField(_("name"), max_length=200)
    on_upstream_failure = models.CharField(
        _("on upstream failure"), max_length=8, default=POLICY_CANCEL
    )

    class Meta:
        verbose_name = _("workflow")
        verbose_name_plural = _("workflows")
        indexes = [
            models.Index(fields=["name", "created_at"], name="jq_workflow_name_idx"),
            models.Index(fields=["finished_at"], name="jq_workflow_open_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.pk}"


class Dependency(models.Model):
    """An edge: ``dependent`` runs after ``upstream`` ended (docs/workflows.md).

    ``state`` is :data:`EDGE_PENDING` until the upstream job ends, then
    :data:`EDGE_DONE` or :data:`EDGE_FAILED`, in the transaction of that end. A
    blocked job becomes due when none of its edges is pending and none failed
    under ``cancel`` or ``skip``.
    """

    upstream = models.ForeignKey(
        "django_jobqueue.Job",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the (column, state) indexes below lead with it
        related_name="+",
    )
    dependent = models.ForeignKey(
        "django_jobqueue.Job",
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,  # the (column, state) indexes below lead with it
        related_name="+",
    )
    policy = models.CharField(_("on upstream failure"), max_length=8, default=POLICY_CANCEL)
    state = models.CharField(_("state"), max_length=8, default=EDGE_PENDING)

    class Meta:
        verbose_name = _("dependency")
        verbose_name_plural = _("dependencies")
        indexes = [
            models.Index(fields=["upstream", "state"], name="jq_dep_upstream_idx"),
            models.Index(fields=["dependent", "state"], name="jq_dep_dependent_idx"),
        ]
        constraints = [
            models.UniqueConstraint(fields=["upstream", "dependent"], name="jq_dep_uniq"),
        ]

    def __str__(self) -> str:
        return f"{self.upstream_id} -> {self.dependent_id} ({self.state})"
