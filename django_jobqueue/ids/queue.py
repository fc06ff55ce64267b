"""The verbs of job ids (docs/design.md#ids): ``Queue`` with add, set, update, cancel, get and list.

What each verb does depends on the state of the id's holder (the table in
:mod:`django_jobqueue.ids`); the locked reads and guarded writes it is made of are in
:mod:`.holds`, what ``get`` and ``list`` return in :mod:`.pages`.

Choices where the seed is silent:

- ``set`` without ``at``/``delay`` runs now; ``update`` without them keeps the time.
- ``set`` on a running job stores the value and time for the run after this one; that
  run happens whether this one succeeds, fails or is cancelled, with attempts from one.
- ``cancel`` of a waiting or failed job deletes its row.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from asgiref.sync import sync_to_async
from django.db import IntegrityError
from django.utils import timezone

from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.durations import Duration, parse_duration, to_ms
from ..core.exceptions import InvalidOption
from ..core.validation import check_delay, check_json, check_queue, check_text
from ..enqueue import build_job, jobs_database
from ..models import DEAD_STATUSES, Job, JobStatus
from ..store.jobstats import count_deduplicated
from ..store.managers import JobSpec
from ..store.registry import UNSET, get_job_description, registered_job_types
from .holds import (
    ROUNDS,
    Kind,
    busy,
    holder,
    insert,
    kind_of,
    locked,
    release,
    restart_failed,
    same_hold,
    set_running,
    set_waiting,
)
from .pages import DEFAULT_PAGE_JOBS, MAX_PAGE_JOBS, STATES, JobView, Page, job_view, list_page

__all__ = ["Queue"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _check_value(value: Any) -> Any:
    return check_json(value, "A job's value", max_bytes=get_config().MAX_PAYLOAD_BYTES)


def _taken(row: Any) -> bool:
    """Whether a :func:`holder` row (or None) keeps its id from a new ``add``."""
    return kind_of(row) != Kind.NONE


def _when(at: datetime | None, delay: Duration | None) -> Any:
    """Return the run time of ``at``/``delay`` as a database value, or None if neither."""
    if at is not None and delay is not None:
        raise InvalidOption("Give either delay or at, not both.")
    if at is not None:
        if not isinstance(at, datetime) or timezone.is_naive(at):
            raise InvalidOption(f"at must be an aware datetime (with tzinfo): got {at!r}.")
        return at
    if delay is not None:
        return Now() + check_delay(delay)
    return None


class Queue:
    """A handle on one queue's jobs by id (docs/design.md#ids): add, set, update, cancel, get, list.

    Parameters
    ----------
    name:
        The queue (1 to 100 characters).
    job_type:
        Job type of the jobs ``add`` and ``set`` create; None: the one job type whose
        queue is ``name`` (an error if there are none or several).
    dedupe:
        How long a done job keeps its id (a duration; None: not at all). Unset: the
        job type's, else ``JOBQUEUE["QUEUES"][name]["dedupe"]``, else ``DEDUPE``.
    keep:
        How long a failed job stays and keeps its id (a duration). Unset: the job
        type's, else the queue's, else ``JOBQUEUE["KEEP"]`` (7 days).

    ``dedupe`` and ``keep`` given here are stored on the jobs this handle creates, so
    workers in any process honour them.

    Implements: docs/design.md#ids.
    """

    def __init__(
        self,
        name: str | None,
        *,
        job_type: str | None = None,
        dedupe: Duration | None = UNSET,
        keep: Duration | None = None,
        _type_handle: bool = False,
    ) -> None:
        if name is not None:
            check_queue(name)
        self._name = name
        self._job_type = job_type
        self._type_handle = _type_handle
        self._dedupe_ms: int | None = None
        if dedupe is not UNSET:
            self._dedupe_ms = 0 if dedupe is None else to_ms(parse_duration(dedupe, name="dedupe"))
        self._keep_ms = None if keep is None else to_ms(parse_duration(keep, name="keep"))

    @classmethod
    def for_job_type(cls, job_type: str) -> Queue:
        """Return the handle of ``job_type``'s jobs, on its queue (resolved per call)."""
        return cls(None, job_type=job_type, _type_handle=True)

    def __repr__(self) -> str:
        return f"<Queue {self._name or '(of ' + str(self._job_type) + ')'!r}>"

    # -- resolution -----------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue's name (a job type handle's: the type's queue, else the default)."""
        if self._name is not None:
            return self._name
        desc = get_job_description(self._job_type or "")
        return desc.queue or get_config().DEFAULT_QUEUE

    def _type(self) -> str:
        if self._job_type is not None:
            return self._job_type
        config = get_config()
        names = sorted(
            name
            for name, desc in registered_job_types().items()
            if (desc.queue or config.DEFAULT_QUEUE) == self._name
        )
        if len(names) != 1:
            raise InvalidOption(
                f"Queue {self._name!r} has {len(names)} job types ({', '.join(names) or 'none'}); "
                "say which with Queue(name, job_type=...)."
            )
        return names[0]

    def _spec(self, value: Any, job_id: str | None, at: Any, delay: Any) -> JobSpec:
        return build_job(self.name, self._type(), value, at=at, delay=delay, job_id=job_id)

    # -- the four calls ---------------------------------------------------------

    def add(
        self,
        value: Any = None,
        *,
        id: str | None = None,  # noqa: A002 (docs/design.md#ids)
        at: datetime | None = None,
        delay: Duration | None = None,
    ) -> bool:
        """Add a job unless its id is taken; answer whether it was added.

        Parameters
        ----------
        value:
            The job's value, any JSON.
        id:
            The job's id in the queue, 1 to 1,024 bytes of UTF-8; None: no id.
        at, delay:
            When it runs: an aware datetime, or a duration from now (``"5s"``,
            seconds, timedelta); neither: now.

        Returns
        -------
        bool
            True if added; False if a job holds the id (scheduled, waiting, running,
            failed and kept, or done while ``dedupe`` keeps it). With ``delay`` this
            is a throttle: the first call stands.

        Raises
        ------
        InvalidJobId, InvalidPayload, InvalidOption, UnknownJobType
            On bad arguments; nothing is written.
        LockTimeout, WrongDatabase
            See :func:`django_jobqueue.enqueue.create_job`.

        Implements: docs/design.md#ids.
        """
        spec = self._spec(value, id, at, delay)
        if id is None:
            insert(spec, self._hold_fields())
            return True
        added = self._add_held(spec, id)
        if not added:  # a turned-away add counts for the dedupe audit
            count_deduplicated([spec], [added])
        return added

    def _add_held(self, spec: JobSpec, id: str) -> bool:  # noqa: A002 (docs/design.md#ids)
        # PostgreSQL: lock, holder check and insert in one statement; None: the locked
        # path below decides (another creator holds the lock, or a stale hold).
        added = Job.objects.add_unless_held(spec, **self._hold_fields())
        if added is not None:
            return added
        # A holder already committed answers without any lock (docs/design.md#creation).
        if _taken(holder(spec.using, spec.queue, id, lock=False)):
            return False

        def body() -> bool:
            # Read without a row lock first: a taken id answers False holding nothing
            # (MySQL keeps a row lock to the end of the caller's transaction, even
            # past a rollback to savepoint, so 29 held-open losers would queue).
            row = holder(spec.using, spec.queue, id, lock=False)
            if row is not None and not _taken(row):
                row = holder(spec.using, spec.queue, id)  # a stale hold to end: lock it
            if _taken(row):
                return False
            release(spec.using, row)
            insert(spec, self._hold_fields())
            return True

        try:
            return locked(spec.using, spec.queue, id, body, wrote=bool)
        except IntegrityError:
            # The unique index caught a creator the lock let through (MySQL, with the
            # caller's transaction open): the id is taken.
            if kind_of(holder(spec.using, spec.queue, id, lock=False)) == Kind.NONE:
                raise
            return False

    def set(
        self,
        id: str,  # noqa: A002 (docs/design.md#ids)
        value: Any = None,
        *,
        at: datetime | None = None,
        delay: Duration | None = None,
    ) -> None:
        """Make the id's job run with ``value``, whatever its state (docs/design.md#ids).

        None or done (while ``dedupe`` keeps it): adds a job. Scheduled or waiting:
        replaces its value and time (a debounce, with ``delay``). Running: one run more
        after this one, with this value and time. Failed: starts it again with this
        value, its attempts from one.

        Parameters
        ----------
        id:
            The job's id, 1 to 1,024 bytes of UTF-8.
        value:
            The job's value, any JSON.
        at, delay:
            When it runs: an aware datetime, or a duration from now; neither: now.

        Raises
        ------
        InvalidJobId, InvalidPayload, InvalidOption, UnknownJobType
            On bad arguments; nothing is written.
        LockTimeout, WrongDatabase
            See :func:`django_jobqueue.enqueue.create_job`.

        Implements: docs/design.md#ids.
        """
        using, queue = self._target(id)
        _check_value(value)
        run_at = _when(at, delay)
        spec_cache: list[JobSpec] = []

        def spec() -> JobSpec:
            if not spec_cache:
                spec_cache.append(self._spec(value, id, at, delay))
            return spec_cache[0]

        def body() -> None:
            for _round in range(ROUNDS):
                row = holder(using, queue, id)
                kind = kind_of(row)
                if kind in (Kind.NONE, Kind.DONE):
                    release(using, row)
                    insert(spec(), self._hold_fields())
                    return
                if kind == Kind.WAITING and set_waiting(row, value, run_at or Now()):
                    return
                if kind == Kind.RUNNING and set_running(row, value, run_at or Now()):
                    return
                if kind == Kind.FAILED and restart_failed(row, value, run_at or Now()):
                    return
            raise busy(queue, id)

        locked(using, queue, id, body)

    def update(
        self,
        id: str,  # noqa: A002 (docs/design.md#ids)
        value: Any = None,
        *,
        at: datetime | None = None,
        delay: Duration | None = None,
    ) -> bool:
        """Change a scheduled or waiting job's value (and time); answer whether it did.

        Parameters
        ----------
        id:
            The job's id, 1 to 1,024 bytes of UTF-8.
        value:
            The job's new value, any JSON.
        at, delay:
            Its new run time; neither: the time is kept.

        Returns
        -------
        bool
            True if the job was scheduled or waiting and now has this value; False if
            there is none, or it is running (too late), failed or done.

        Raises
        ------
        InvalidJobId, InvalidPayload, InvalidOption
            On bad arguments; nothing is written.
        LockTimeout, WrongDatabase
            See :func:`django_jobqueue.enqueue.create_job`.

        Implements: docs/design.md#ids.
        """
        using, queue = self._target(id)
        _check_value(value)
        run_at = _when(at, delay)

        if kind_of(holder(using, queue, id, lock=False)) != Kind.WAITING:
            return False  # nothing to change: no lock taken

        def body() -> bool:
            for _round in range(ROUNDS):
                row = holder(using, queue, id)
                if kind_of(row) != Kind.WAITING:
                    return False
                if set_waiting(row, value, run_at):
                    return True
            raise busy(queue, id)

        return locked(using, queue, id, body, wrote=bool)

    def cancel(self, id: str) -> bool:  # noqa: A002 (docs/design.md#ids)
        """Remove the id's waiting or failed job, or ask its running job to stop.

        Parameters
        ----------
        id:
            The job's id, 1 to 1,024 bytes of UTF-8.

        Returns
        -------
        bool
            True if a scheduled, waiting or failed job was removed, or a running job
            was told to stop (its handler sees ``ctx.cancelled``; the job ends
            ``cancelled``, or done if it finishes first); False if there was none or
            it is done.

        Raises
        ------
        InvalidJobId
            If ``id`` is not 1 to 1,024 bytes of UTF-8.
        LockTimeout, WrongDatabase
            See :func:`django_jobqueue.enqueue.create_job`.

        Implements: docs/design.md#ids.
        """
        using, queue = self._target(id)
        if kind_of(holder(using, queue, id, lock=False)) in (Kind.NONE, Kind.DONE):
            return False  # nothing to cancel: no lock taken

        def body() -> bool:
            for _round in range(ROUNDS):
                row = holder(using, queue, id)
                kind = kind_of(row)
                if kind in (Kind.NONE, Kind.DONE):
                    return False
                rows = same_hold(row)
                if kind == Kind.WAITING:
                    if rows.filter(waiting=True).delete()[0]:
                        return True
                elif kind == Kind.FAILED:
                    if rows.filter(status__in=DEAD_STATUSES).delete()[0]:
                        return True
                elif rows.filter(status=JobStatus.PROCESSING, lease_token=row.lease_token).update(
                    cancel_requested=True, rerun=False, rerun_payload=None, rerun_at=None
                ):
                    logger.info("cancel requested jid=%s queue=%s", row.jid, queue)
                    return True
            raise busy(queue, id)

        return locked(using, queue, id, body, wrote=bool)

    # -- reading ---------------------------------------------------------------

    def get(self, id: str) -> JobView | None:  # noqa: A002 (docs/design.md#ids)
        """Return the job that holds ``id`` in this queue, or None.

        Parameters
        ----------
        id:
            The job's id, 1 to 1,024 bytes of UTF-8.

        Returns
        -------
        JobView or None
            The job (scheduled, waiting, running, failed and kept, or done while
            ``dedupe`` keeps it), or None when the id is free.

        Raises
        ------
        InvalidJobId
            If ``id`` is not 1 to 1,024 bytes of UTF-8.

        Implements: docs/design.md#ids.
        """
        using, queue = self._target(id)
        row = holder(using, queue, id, lock=False)
        return None if kind_of(row) == Kind.NONE else job_view(row)

    def list(
        self,
        *,
        prefix: str | None = None,
        state: str | None = None,
        limit: int = DEFAULT_PAGE_JOBS,
        after: str | None = None,
    ) -> Page:
        """Return one page of this queue's jobs (a job type handle: of that type).

        Parameters
        ----------
        prefix:
            Only jobs whose id starts with this text, byte for byte (``%``, ``_`` and
            ``\\`` match only themselves). End it with a separator: ``"chat:4"``
            matches ``"chat:42:..."`` too.
        state:
            Only jobs in this state: scheduled, waiting, running, failed, done or
            cancelled; None: all.
        limit:
            Most jobs on the page, 1 to 1,000 (default 100). A page also stops before
            its values pass 4 MiB of JSON (it always holds at least one job).
        after:
            The ``next`` cursor of the previous page, with the same filters.

        Returns
        -------
        Page
            ``Page(jobs, next)``: oldest first, or for ``state="failed"`` the latest
            failure first; ``next`` is None on the last page. Each job appears once
            across the pages.

        Raises
        ------
        InvalidOption
            If ``limit``, ``state`` or ``after`` is invalid.
        InvalidJobId
            If ``prefix`` is not 1 to 1,024 bytes of UTF-8.

        Implements: docs/design.md#ids.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_JOBS:
            raise InvalidOption(
                f"limit must be an integer from 1 to {MAX_PAGE_JOBS}: got {limit!r}."
            )
        if state is not None and state not in STATES:
            raise InvalidOption(f"state must be one of {', '.join(STATES)}: got {state!r}.")
        if prefix is not None:
            check_text(prefix, "A prefix")
        using = jobs_database()
        jobs = Job.objects.using(using).filter(queue=self.name).annotate(db_now=Now())
        if self._type_handle:
            jobs = jobs.filter(job_type=self._job_type)
        if prefix is not None:
            jobs = jobs.filter(job_id__startswith=prefix)
        return list_page(jobs, prefix=prefix, state=state, limit=limit, after=after)

    # -- async twins ------------------------------------------------------------

    async def aadd(self, value: Any = None, **options: Any) -> bool:
        """Async twin of :meth:`add`."""
        return await _async(self.add, value, **options)

    async def aset(self, id: str, value: Any = None, **options: Any) -> None:  # noqa: A002
        """Async twin of :meth:`set`."""
        return await _async(self.set, id, value, **options)

    async def aupdate(self, id: str, value: Any = None, **options: Any) -> bool:  # noqa: A002
        """Async twin of :meth:`update`."""
        return await _async(self.update, id, value, **options)

    async def acancel(self, id: str) -> bool:  # noqa: A002
        """Async twin of :meth:`cancel`."""
        return await _async(self.cancel, id)

    async def aget(self, id: str) -> JobView | None:  # noqa: A002
        """Async twin of :meth:`get`."""
        return await _async(self.get, id)

    async def alist(self, **options: Any) -> Page:
        """Async twin of :meth:`list`."""
        return await _async(self.list, **options)

    # -- helpers ---------------------------------------------------------------

    def _target(self, job_id: str) -> tuple[str, str]:
        check_text(job_id, "A job id")
        return jobs_database(), self.name

    def _hold_fields(self) -> dict[str, Any]:
        return {"dedupe_ms": self._dedupe_ms, "keep_ms": self._keep_ms}


async def _async(func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await sync_to_async(func)(*args, **kwargs)
