"""Job ids (seed 002): add, set, update, cancel, get and list.

An id names one job of a queue. Four calls act on it, and what each does depends on
the state of the job that holds the id (seed 002, "Four calls, one table"):

=========================  =============  ==============  ======  ===============
the id's job is            ``add``        ``set``         update  ``cancel``
=========================  =============  ==============  ======  ===============
none                       adds it: True  adds it         False   False
scheduled or waiting       False          replaces value  True    removes it: True
                                          and time
running                    False          one run more    False   asks it to stop:
                                          after this one          True
failed, kept for ``keep``  False          starts it again False   removes it: True
                                          (attempt 1)
done, ``dedupe`` keeps it  False          adds it again   False   False
=========================  =============  ==============  ======  ===============

Stored statuses map onto those words: scheduled/waiting = ``init``/``retry`` (scheduled
while ``run_at`` is in the future), running = ``processing``, failed =
``error``/``max_retry``, done = ``done``. A hold past ``id_held_until`` counts as none,
and so does a ``cancelled`` job (a cancel ends the id's job, whatever the worker keeps
for display).

Atomicity. Each call runs under the creation lock of its (queue, id)
(:func:`django_jobqueue.locks.creation_lock`), so calls on one id are serialised with
each other and with ``enqueue_job(job_id=...)``. Workers never take that lock; against
them every change is a guarded ``UPDATE``/``DELETE`` that filters on the state read
(``waiting=True`` for a waiting job, ``processing`` and the lease token for a running
one), after the holder's row was read with ``SELECT ... FOR UPDATE``. A claim racing an
``update`` or ``cancel`` either wins (the call then sees a running job and answers
False, or True for ``cancel``'s stop request) or loses (the job runs with the new value,
or never runs). A ``set`` that loses to a claim becomes a rerun request, which
``storage.complete``/``fail``/``finish_cancelled`` honour with their own guarded update.

Choices where the seed is silent:

- ``set`` without ``at``/``delay`` runs now; ``update`` without them keeps the time.
- ``set`` on a running job stores the value and time for the run after this one; that
  run happens whether this one succeeds, fails or is cancelled, with attempts from one.
- ``cancel`` of a waiting or failed job deletes its row.
- ``list`` orders by creation (oldest first), except ``state="failed"``: latest failure
  first. A prefix is matched in the database (``LIKE``, with ``%``, ``_`` and ``\\``
  escaped; ``LIKE BINARY`` on MySQL/MariaDB) and checked again in Python on the code
  points, which for UTF-8 is the bytes: SQLite's ``LIKE`` ignores ASCII case.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.db import IntegrityError
from django.db.models import BooleanField, Case, Q, QuerySet, Value, When
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from . import locks
from .conf import get_config
from .dbclock import Now
from .durations import Duration, parse_duration, to_ms
from .enqueue import build_job, jobs_database
from .exceptions import InvalidOption, LockTimeout
from .managers import JobSpec, check_transaction, hold_lock_names
from .validation import check_delay, check_json, check_queue, check_text
from .wakeups import notify_on_commit

__all__ = [
    "DEFAULT_PAGE_JOBS",
    "MAX_PAGE_BYTES",
    "MAX_PAGE_JOBS",
    "STATES",
    "JobView",
    "Page",
    "Queue",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Seed 002's words for a job's state, plus ``cancelled``.
SCHEDULED, WAITING, RUNNING, FAILED, DONE, CANCELLED = (
    "scheduled",
    "waiting",
    "running",
    "failed",
    "done",
    "cancelled",
)
STATES = (SCHEDULED, WAITING, RUNNING, FAILED, DONE, CANCELLED)
#: Page limits (seed 002 "Pages of jobs"): jobs per page, and bytes of values (JSON).
MAX_PAGE_JOBS = 1_000
DEFAULT_PAGE_JOBS = 100
MAX_PAGE_BYTES = 4 * 1024 * 1024

_UNSET: Any = object()
# The kinds of the table's rows.
_NONE, _WAITING, _RUNNING, _FAILED, _DONE = "none", "waiting", "running", "failed", "done"
# Guarded writes that find the row changed under them re-read it; only a worker can
# change a row we do not hold, and each change moves it forward, so few rounds do.
_ROUNDS = 8


@dataclass(frozen=True)
class JobView:
    """A job as ``get`` and ``list`` show it (seed 002 ``Job``)."""

    #: The job's id in its queue (seed 002), or None for a job without one.
    id: str | None
    #: The job's value (its JSON payload).
    value: Any
    #: scheduled, waiting, running, failed, done or cancelled.
    state: str
    #: When it runs (waiting, scheduled) or last became due.
    at: datetime
    #: Attempts started so far (0 before the first run).
    attempt: int
    #: The job's public handle.
    jid: str
    queue: str
    job_type: str
    priority: int
    max_retry: int
    #: The handler's return value, once done.
    result: Any
    #: The last failure's message, if any.
    message: str
    #: True once ``cancel`` asked the running job to stop.
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class Page:
    """One page of ``list``: its jobs and an opaque cursor for the next page, or None."""

    #: The jobs of this page, in the list's order.
    jobs: list[JobView]
    #: Pass as ``after=`` to get the following page; None on the last page.
    next: str | None


def _state_word(job: Any, now: datetime) -> str:
    from .models import DEAD_STATUSES, JobStatus

    if job.waiting:
        return SCHEDULED if job.run_at > now else WAITING
    if job.status == JobStatus.PROCESSING:
        return RUNNING
    if job.status in DEAD_STATUSES:
        return FAILED
    if job.status == JobStatus.DONE:
        return DONE
    return CANCELLED


def _view(job: Any) -> JobView:
    return JobView(
        id=job.job_id,
        value=job.payload,
        state=_state_word(job, job.db_now),
        at=job.run_at,
        attempt=job.attempt,
        jid=job.jid,
        queue=job.queue,
        job_type=job.job_type,
        priority=job.priority,
        max_retry=job.max_retry,
        result=job.result,
        message=job.message,
        cancel_requested=job.cancel_requested,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def _check_value(value: Any) -> Any:
    return check_json(value, "A job's value")


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
    """A handle on one queue's jobs by id (seed 002): add, set, update, cancel, get, list.

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

    Implements: seed 002, "Ids".
    """

    def __init__(
        self,
        name: str | None,
        *,
        job_type: str | None = None,
        dedupe: Duration | None = _UNSET,
        keep: Duration | None = None,
        _type_handle: bool = False,
    ) -> None:
        if name is not None:
            check_queue(name)
        self._name = name
        self._job_type = job_type
        self._type_handle = _type_handle
        self._dedupe_ms: int | None = None
        if dedupe is not _UNSET:
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
        from .registry import get_job_description

        desc = get_job_description(self._job_type or "")
        return desc.queue or get_config().DEFAULT_QUEUE

    def _type(self) -> str:
        if self._job_type is not None:
            return self._job_type
        from .registry import registered_job_types

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
        id: str | None = None,  # noqa: A002 (seed 002's word)
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

        Implements: seed 002, "Four calls, one table" (``add``).
        """
        spec = self._spec(value, id, at, delay)
        if id is None:
            _insert(spec, self._hold_fields())
            return True
        added = _add_in_one_statement(spec, self._hold_fields())
        if added is not None:
            return added

        def body() -> bool:
            row = _holder(spec.using, spec.queue, id)
            if _kind(row) != _NONE:
                return False
            _release(spec.using, row)
            _insert(spec, self._hold_fields())
            return True

        try:
            return _locked(spec.using, spec.queue, id, body)
        except IntegrityError:
            # The unique index caught a creator the lock let through (MySQL, with the
            # caller's transaction open): the id is taken.
            if _kind(_holder(spec.using, spec.queue, id, lock=False)) == _NONE:
                raise
            return False

    def set(
        self,
        id: str,  # noqa: A002 (seed 002's word)
        value: Any = None,
        *,
        at: datetime | None = None,
        delay: Duration | None = None,
    ) -> None:
        """Make the id's job run with ``value``, whatever its state (seed 002 ``set``).

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

        Implements: seed 002, "Four calls, one table" (``set``); "Debounce and throttle".
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
            for _round in range(_ROUNDS):
                row = _holder(using, queue, id)
                kind = _kind(row)
                if kind in (_NONE, _DONE):
                    _release(using, row)
                    _insert(spec(), self._hold_fields())
                    return
                if kind == _WAITING and _set_waiting(row, value, run_at or Now()):
                    return
                if kind == _RUNNING and _set_running(row, value, run_at or Now()):
                    return
                if kind == _FAILED and _restart_failed(row, value, run_at or Now()):
                    return
            raise _busy(queue, id)

        _locked(using, queue, id, body)

    def update(
        self,
        id: str,  # noqa: A002 (seed 002's word)
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

        Implements: seed 002, "Four calls, one table" (``update``).
        """
        using, queue = self._target(id)
        _check_value(value)
        run_at = _when(at, delay)

        def body() -> bool:
            for _round in range(_ROUNDS):
                row = _holder(using, queue, id)
                if _kind(row) != _WAITING:
                    return False
                if _set_waiting(row, value, run_at):
                    return True
            raise _busy(queue, id)

        return _locked(using, queue, id, body)

    def cancel(self, id: str) -> bool:  # noqa: A002 (seed 002's word)
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

        Implements: seed 002, "Four calls, one table" (``cancel``).
        """
        using, queue = self._target(id)

        def body() -> bool:
            from .models import DEAD_STATUSES, JobStatus

            for _round in range(_ROUNDS):
                row = _holder(using, queue, id)
                kind = _kind(row)
                if kind in (_NONE, _DONE):
                    return False
                rows = _same_hold(row)
                if kind == _WAITING:
                    if rows.filter(waiting=True).delete()[0]:
                        return True
                elif kind == _FAILED:
                    if rows.filter(status__in=DEAD_STATUSES).delete()[0]:
                        return True
                elif rows.filter(status=JobStatus.PROCESSING, lease_token=row.lease_token).update(
                    cancel_requested=True, rerun=False, rerun_payload=None, rerun_at=None
                ):
                    logger.info("cancel requested jid=%s queue=%s", row.jid, queue)
                    return True
            raise _busy(queue, id)

        return _locked(using, queue, id, body)

    # -- reading ---------------------------------------------------------------

    def get(self, id: str) -> JobView | None:  # noqa: A002 (seed 002's word)
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

        Implements: seed 002, "Ids" (``get``).
        """
        using, queue = self._target(id)
        row = _holder(using, queue, id, lock=False)
        return None if _kind(row) == _NONE else _view(row)

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

        Implements: seed 002, "Pages of jobs".
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE_JOBS:
            raise InvalidOption(
                f"limit must be an integer from 1 to {MAX_PAGE_JOBS}: got {limit!r}."
            )
        if state is not None and state not in STATES:
            raise InvalidOption(f"state must be one of {', '.join(STATES)}: got {state!r}.")
        if prefix is not None:
            check_text(prefix, "A prefix")
        from .models import Job

        using = jobs_database()
        jobs = Job.objects.using(using).filter(queue=self.name).annotate(db_now=Now())
        if self._type_handle:
            jobs = jobs.filter(job_type=self._job_type)
        if prefix is not None:
            jobs = jobs.filter(job_id__startswith=prefix)
        jobs = _filter_state(jobs, state)
        failed_order = state == FAILED
        key = None if after is None else _decode_cursor(after, failed_order)
        picked: list[Any] = []
        size = 0
        more = False
        for row in _scan(jobs, failed_order, key, limit, prefix):
            if len(picked) == limit:
                more = True
                break
            row_size = len(json.dumps(row.payload).encode("utf-8"))
            if picked and size + row_size > MAX_PAGE_BYTES:
                more = True
                break
            picked.append(row)
            size += row_size
        cursor = _encode_cursor(picked[-1], failed_order) if more else None
        return Page(jobs=[_view(row) for row in picked], next=cursor)

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
    from asgiref.sync import sync_to_async

    return await sync_to_async(func)(*args, **kwargs)


def _busy(queue: str, job_id: str) -> LockTimeout:
    return LockTimeout(
        f"The job of id {job_id!r} on queue {queue!r} kept changing under the call; retry it."
    )


# -- locked reads and guarded writes ------------------------------------------------


def _locked(using: str, queue: str, job_id: str, body: Callable[[], T]) -> T:
    """Run ``body`` in a transaction holding the creation lock of (queue, id)."""
    check_transaction(using)
    timeout_ms = get_config().LOCK_TIMEOUT_MS
    names = hold_lock_names(queue, job_id=job_id)

    def attempt() -> T:
        with locks.creation_lock(using, names, timeout_ms=timeout_ms):
            return body()

    return locks.retry_when_locked(using, attempt, timeout_ms=timeout_ms)


def _holder(using: str, queue: str, job_id: str, *, lock: bool = True) -> Any:
    """Return the row holding (queue, id), locked, annotated ``held`` and ``db_now``.

    The row is found by the hash of the id's bytes, so ids compare byte for byte on
    every database. It is locked by primary key only (no gap locks on MySQL).
    """
    from .models import Job, hold_hash

    id_hash = hold_hash(job_id)
    pk = (
        Job.objects.using(using)
        .filter(queue=queue, job_id_hash=id_hash)
        .values_list("pk", flat=True)
        .first()
    )
    if pk is None:
        return None
    rows = Job.objects.using(using).filter(pk=pk, queue=queue, job_id_hash=id_hash)
    if lock:
        rows = rows.select_for_update()
    return rows.annotate(
        db_now=Now(),
        held=Case(
            When(Q(id_held_until__isnull=True) | Q(id_held_until__gt=Now()), then=Value(True)),  # noqa: FBT003
            default=Value(False),  # noqa: FBT003
            output_field=BooleanField(),
        ),
    ).first()


def _kind(row: Any) -> str:
    """Return the table row (none, waiting, running, failed, done) of a holder."""
    from .models import DEAD_STATUSES, JobStatus

    if row is None or not row.held:
        return _NONE
    if row.waiting:
        return _WAITING
    if row.status == JobStatus.PROCESSING:
        return _RUNNING
    if row.status in DEAD_STATUSES:
        return _FAILED
    if row.status == JobStatus.DONE:
        return _DONE
    return _NONE  # cancelled: the cancel ended the id's job


def _same_hold(row: Any) -> QuerySet[Any]:
    from .models import Job

    return Job.objects.using(row._state.db).filter(
        pk=row.pk, queue=row.queue, job_id_hash=row.job_id_hash
    )


def _release(using: str, row: Any) -> None:
    """End the hold of a row that no longer takes its id (stale, cancelled or done)."""
    if row is not None:
        _same_hold(row).update(job_id_hash=None, updated_at=Now())


def _insert(spec: JobSpec, hold_fields: dict[str, Any]) -> str:
    """Insert ``spec``'s job under the (queue, id) lock the calling verb holds."""
    from .models import Job

    jid = Job.objects.insert_held(spec, **hold_fields)
    logger.debug("job added jid=%s queue=%s type=%s", jid, spec.queue, spec.job_type)
    return jid


def _add_in_one_statement(spec: JobSpec, hold_fields: dict[str, Any]) -> bool | None:
    """PostgreSQL: ``add`` as one statement, or None when the locked path must decide."""
    from .models import Job

    return Job.objects.add_unless_held(spec, **hold_fields)


def _wake_if_due(using: str, queue: str, due: bool) -> None:
    if due:
        notify_on_commit(using, queue)


def _set_waiting(row: Any, value: Any, run_at: Any) -> bool:
    """Replace a waiting job's value (and run time, unless None); False if it moved on."""
    fields: dict[str, Any] = {
        "payload": value,
        "rerun": False,
        "rerun_payload": None,
        "rerun_at": None,
        "updated_at": Now(),
    }
    if run_at is not None:
        fields["run_at"] = run_at
    updated = _same_hold(row).filter(waiting=True).update(**fields)
    if updated:
        _wake_if_due(row._state.db, row.queue, isinstance(run_at, Now))
    return bool(updated)


def _set_running(row: Any, value: Any, run_at: Any) -> bool:
    """Ask a running job for one run more with ``value``; False if it finished."""
    from .models import JobStatus

    return bool(
        _same_hold(row)
        .filter(status=JobStatus.PROCESSING, lease_token=row.lease_token)
        .update(rerun=True, rerun_payload=value, rerun_at=run_at, updated_at=Now())
    )


def _restart_failed(row: Any, value: Any, run_at: Any) -> bool:
    """Start a failed (dead letter) job again with ``value``, attempts from one."""
    from .models import DEAD_STATUSES
    from .storage import restart_fields

    updated = (
        _same_hold(row)
        .filter(status__in=DEAD_STATUSES)
        .update(
            **restart_fields(
                payload=value,
                run_at=run_at,
                result=None,
                message="",
                started_at=None,
                rerun=False,
                rerun_payload=None,
                rerun_at=None,
            )
        )
    )
    if updated:
        _wake_if_due(row._state.db, row.queue, isinstance(run_at, Now))
    return bool(updated)


# -- list ------------------------------------------------------------------------


def _filter_state(jobs: QuerySet[Any], state: str | None) -> QuerySet[Any]:
    from .models import DEAD_STATUSES, JobStatus

    if state == SCHEDULED:
        return jobs.filter(waiting=True, run_at__gt=Now())
    if state == WAITING:
        return jobs.filter(waiting=True, run_at__lte=Now())
    if state == RUNNING:
        return jobs.filter(status=JobStatus.PROCESSING)
    if state == FAILED:
        return jobs.filter(status__in=DEAD_STATUSES)
    if state == DONE:
        return jobs.filter(status=JobStatus.DONE)
    if state == CANCELLED:
        return jobs.filter(status=JobStatus.CANCELLED)
    return jobs


def _scan(
    jobs: QuerySet[Any], failed_order: bool, key: Any, limit: int, prefix: str | None
) -> Iterator[Any]:
    """Yield ``jobs`` after ``key`` in the list's order, prefix checked on the bytes."""
    batch = limit + 1
    while True:
        rows = jobs
        if failed_order:
            if key is not None:
                finished_at, pk = key
                rows = rows.filter(
                    Q(finished_at__lt=finished_at) | Q(finished_at=finished_at, pk__lt=pk)
                )
            rows = rows.order_by("-finished_at", "-pk")
        else:
            if key is not None:
                rows = rows.filter(pk__gt=key)
            rows = rows.order_by("pk")
        fetched = list(rows[:batch])
        for row in fetched:
            key = (row.finished_at, row.pk) if failed_order else row.pk
            # Code points compare as UTF-8 bytes do; SQLite's LIKE ignores ASCII case.
            if prefix is None or (row.job_id is not None and row.job_id.startswith(prefix)):
                yield row
        if len(fetched) < batch:
            return


def _encode_cursor(row: Any, failed_order: bool) -> str:
    if failed_order:
        payload = {"o": "f", "t": row.finished_at.isoformat(), "k": row.pk}
    else:
        payload = {"o": "c", "k": row.pk}
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str, failed_order: bool) -> Any:
    bad = InvalidOption(
        f"after={cursor!r} is not a cursor of this list; pass the next of a page listed "
        "with the same state."
    )
    if not isinstance(cursor, str):
        raise bad
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        pk = data["k"]
        # A pk every database compares (BigAutoField: signed 64 bits).
        if isinstance(pk, bool) or not isinstance(pk, int) or not 0 <= pk < 2**63:
            raise bad
        if failed_order:
            if data["o"] != "f":
                raise bad
            finished_at = parse_datetime(data["t"])
            if finished_at is None or timezone.is_naive(finished_at):
                raise bad
            return finished_at, pk
        if data["o"] != "c":
            raise bad
        return pk
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise bad from exc
