"""The job changelist's paginator and filters: fast on big tables.

No full-table ``COUNT``: the paginator reads the planner's estimate on PostgreSQL
when nothing is filtered, else counts at most
:attr:`EstimatedCountPaginator.count_limit` + 1 rows. The queue and job type filters
list the values known to the registry and the settings plus those of the latest jobs
instead of a ``DISTINCT`` over the table.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property
from django.utils.translation import gettext_lazy as _

from ..core.conf import get_config
from ..core.dbclock import Now
from ..models import Batch, Job, JobStatus, Workflow
from ..store.registry import registered_job_types
from ..store.states import STATE_OF_STATUS, status_filter, status_label

__all__ = [
    "BatchFilter",
    "EstimatedCountPaginator",
    "JobTypeFilter",
    "QueueFilter",
    "StatusFilter",
    "UniqueKeyHeldFilter",
    "WorkflowFilter",
    "planner_rows",
]

logger = logging.getLogger(__name__)

#: How many of the latest jobs the queue and job type filters look at for values.
FILTER_SAMPLE_ROWS = 10_000


class EstimatedCountPaginator(Paginator):
    """A paginator that never counts a whole big table.

    Unfiltered, on PostgreSQL, the count is the planner's row estimate (from
    ``pg_class.reltuples``, read through ``EXPLAIN``) when that is above
    :attr:`count_limit`. Otherwise the count is exact up to ``count_limit`` and
    capped at ``count_limit + 1`` (a ``COUNT`` over a ``LIMIT`` subquery).
    """

    #: Exact counts up to this many rows.
    count_limit = 10_000

    @cached_property
    def count(self) -> int:
        """Return the (estimated or capped) number of rows."""
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return len(queryset)
        queryset = queryset.order_by()
        if not queryset.query.where and not queryset.query.is_sliced:
            estimate = planner_rows(queryset)
            if estimate is not None and estimate > self.count_limit:
                return estimate
        return queryset[: self.count_limit + 1].count()


def planner_rows(queryset: QuerySet[Any]) -> int | None:
    """Return the PostgreSQL planner's row estimate of ``queryset``; None elsewhere."""
    if connections[queryset.db].vendor != "postgresql":
        return None
    try:
        plan = json.loads(queryset.explain(format="json"))
        return int(plan[0]["Plan"]["Plan Rows"])
    except (ValueError, KeyError, IndexError, TypeError):  # an unexpected plan shape
        logger.warning("no planner estimate for the job changelist", exc_info=True)
        return None


def _sample_values(jobs: QuerySet[Job], field: str) -> set[str]:
    """Return the ``field`` values of the latest jobs (bounded, by primary key)."""
    rows = jobs.order_by("-pk").values_list(field, flat=True)[:FILTER_SAMPLE_ROWS]
    return set(rows)


def _known_job_types() -> dict[str, str | None]:
    """Return {job type: its queue} of the registry and ``JOBQUEUE["JOB_TYPES"]``."""
    try:
        return {name: desc.queue for name, desc in registered_job_types().items()}
    except Exception:  # a broken declaration must not break the admin
        logger.warning("job types could not be listed for the admin filter", exc_info=True)
        return {}


class _ValueFilter(admin.SimpleListFilter):
    """Filter on one text field by exact value; values listed without a table scan."""

    field_name = ""

    def known_values(self) -> Iterable[str]:
        """Values known without reading the job table."""
        return ()

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[Any]:
        """List the known values, the latest jobs' values and the chosen one."""
        jobs = model_admin.get_queryset(request)
        values = set(self.known_values()) | _sample_values(jobs, self.field_name)
        chosen = self.value()
        if chosen:
            values.add(chosen)
        return [(value, value) for value in sorted(v for v in values if v)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the jobs with the chosen value."""
        if self.value():
            return queryset.filter(**{self.field_name: self.value()})
        return queryset


class QueueFilter(_ValueFilter):
    """Jobs of one queue."""

    title = _("queue")
    parameter_name = "queue"
    field_name = "queue"

    def known_values(self) -> Iterable[str]:
        """The default queue, the configured queues and the job types' queues."""
        config = get_config()
        queues = {config.DEFAULT_QUEUE, *config.QUEUES}
        queues.update(queue for queue in _known_job_types().values() if queue)
        return queues


class JobTypeFilter(_ValueFilter):
    """Jobs of one job type."""

    title = _("job type")
    parameter_name = "job_type"
    field_name = "job_type"

    def known_values(self) -> Iterable[str]:
        """The registered and declared job types."""
        return _known_job_types().keys()


class StatusFilter(admin.SimpleListFilter):
    """Jobs of one stored status, labelled with its state word (docs/design.md#states):
    ``failed (max_retry)``; ``?status=<stored value>`` as before."""

    title = _("state")
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[Any]:
        """Each stored status, labelled with its state word."""
        return [
            (status, status_label(STATE_OF_STATUS[status], status)) for status in JobStatus.values
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the jobs of the chosen status."""
        status = self.value()
        if status is not None and status in JobStatus.values:
            return queryset.filter(status_filter(status))
        return queryset


class UniqueKeyHeldFilter(admin.SimpleListFilter):
    """Jobs that hold a unique key lock now (docs/design.md#unique-keys), or not."""

    title = _("holds a unique key")
    parameter_name = "unique_held"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[Any]:
        """Yes or no."""
        return [("yes", _("Yes")), ("no", _("No"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the holders (hash set, not expired by the database clock), or the others."""
        held = Q(unique_key_hash__isnull=False, unique_expires_at__gt=Now())
        if self.value() == "yes":
            return queryset.filter(held)
        if self.value() == "no":
            return queryset.exclude(held)
        return queryset


#: Batches or workflows the filters list (the latest ones); any other is reached by
#: its link on the console's page, or by ``?batch=<id>`` / ``?workflow=<id>``.
FLOW_CHOICES = 20


class _FlowFilter(admin.SimpleListFilter):
    """Jobs of one batch or workflow (docs/workflows.md), by its id: the latest
    :data:`FLOW_CHOICES` listed, newest first, and the chosen one."""

    model: type[Batch] | type[Workflow] = Batch
    field_name = "batch_id"

    def label(self, row: Any) -> str:
        """How a row is listed."""
        return f"{row.pk} ({row.done + row.failed + row.cancelled}/{row.total})"

    def chosen(self) -> int | None:
        """The chosen id, or None.

        Raises
        ------
        IncorrectLookupParameters
            If the parameter is not an id (the admin then shows the list unfiltered
            with its ``?e=1`` notice).
        """
        value = self.value()
        if not value:
            return None
        if not value.isdigit() or not 1 <= int(value) <= 2**63 - 1:
            raise IncorrectLookupParameters(f"{self.parameter_name} must be an id: {value!r}")
        return int(value)

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[Any]:
        """The latest rows, and the chosen one."""
        using = model_admin.get_queryset(request).db
        rows = list(self.model.objects.using(using).order_by("-pk")[:FLOW_CHOICES])
        try:
            chosen = self.chosen()
        except IncorrectLookupParameters:
            chosen = None
        if chosen is not None and all(row.pk != chosen for row in rows):
            rows.extend(self.model.objects.using(using).filter(pk=chosen))
        return [(str(row.pk), self.label(row)) for row in rows]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        """Keep the jobs of the chosen one (by the job table's own index on it)."""
        chosen = self.chosen()
        if chosen is None:
            return queryset
        return queryset.filter(**{self.field_name: chosen})


class BatchFilter(_FlowFilter):
    """Jobs of one batch."""

    title = _("batch")
    parameter_name = "batch"
    model = Batch
    field_name = "batch_id"


class WorkflowFilter(_FlowFilter):
    """Jobs of one workflow, listed by name and id."""

    title = _("workflow")
    parameter_name = "workflow"
    model = Workflow
    field_name = "workflow_id"

    def label(self, row: Any) -> str:
        """``<name> <id> (<ended>/<total>)``."""
        return f"{row.name} {row.pk} ({row.done + row.failed + row.cancelled}/{row.total})"
