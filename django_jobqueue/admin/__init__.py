"""The Django admin for jobs and schedules.

Jobs are read-only: the admin shows them and acts on them (retry now, cancel,
delete) through :mod:`django_jobqueue.maintenance`, the functions that
``manage.py jobqueue`` uses too: as changelist actions, and as "Retry now" and
"Cancel" buttons on a job's page, which ask for confirmation and leave an admin
log entry. Stored data (payloads, results, messages, tracebacks) is rendered with
``format_html`` only, so it is always escaped; a ``secure`` job type's payload and
result are never shown. Times are shown to the second, in the current time zone,
with their age ("3 s ago").

- :mod:`.changelist`: the paginator that never counts a big table, and the filters;
- :mod:`.display`: escaped JSON, hidden secure values, times;
- :mod:`.jobs`: :class:`JobAdmin`; :mod:`.schedules`: :class:`ScheduleJobAdmin`;
- :mod:`.tokens`: :class:`ApiTokenAdmin`, the SDK gateway's tokens (secret shown once).
"""

from __future__ import annotations

from .changelist import EstimatedCountPaginator
from .jobs import JobAdmin
from .schedules import ScheduleJobAdmin
from .tokens import ApiTokenAdmin

__all__ = ["ApiTokenAdmin", "EstimatedCountPaginator", "JobAdmin", "ScheduleJobAdmin"]
