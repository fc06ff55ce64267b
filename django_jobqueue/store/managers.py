"""The managers of jobs and plans: a job is created only under its advisory locks.

``Job.objects`` is a :class:`JobManager`: :meth:`JobManager.create_job` inserts a
validated :class:`JobSpec` (built by :func:`django_jobqueue.enqueue.build_job`) in
the caller's transaction on the jobs' database. A job with an id or a unique key is
created under :func:`django_jobqueue.store.locks.creation_lock`:

1. a cheap pre-check, without locks (docs/design.md#creation);
2. the locks of its (queue, id) and (queue, unique key), in sorted order;
3. a re-check of the holders, clearing any stale hold (an id past ``dedupe``/``keep``,
   a unique key past its TTL);
4. the insert (:mod:`django_jobqueue.store.rawinsert`, one raw statement). The unique
   indexes over (queue, hash) are the last line: an insert that loses a race the
   locks let through (MySQL, caller's transaction held open) fails there and is
   answered as the duplicate it is.

On PostgreSQL steps 1 to 4 are first tried as one statement
(:func:`~django_jobqueue.store.rawkeyed.insert_unless_held`): the locks tried without a
wait, the holders read, the row inserted when there is none. Only a lock another
creator holds, or a stale hold to clear, takes the path above.

A due job then wakes idle workers once the transaction commits: on PostgreSQL its
``pg_notify`` rides the insert statement, which PostgreSQL delivers at commit only.

Django's own ``create()``, ``bulk_create()``, ``get_or_create()`` and
``update_or_create()`` would make a job with none of that: on jobs they raise
:class:`~django_jobqueue.core.exceptions.DirectCreateRefused`, which names
``enqueue_job``. ``ScheduleJob.objects`` is a :class:`ScheduleJobManager`: plan
creation and the guarded advance of a plan to its next tick.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

from django.db import IntegrityError, connections, models, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q

from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.exceptions import DirectCreateRefused, DuplicateJob, WrongDatabase
from ..core.validation import hold_hash
from . import locks
from .rawinsert import Row, insert_rows, new_jids
from .rawkeyed import insert_unless_held

__all__ = [
    "CreateRefusingQuerySet",
    "EnqueueResult",
    "JobManager",
    "JobSpec",
    "ScheduleJobManager",
    "check_transaction",
    "hold_hash",
    "hold_lock_names",
]

logger = logging.getLogger(__name__)

#: The model of a queryset or manager (Job, ScheduleJob); this module imports no model.
_M = TypeVar("_M", bound=models.Model)

#: Creations retried when the unique index refused an insert whose holder is gone.
_INTEGRITY_RETRIES = 3
#: Half the window of the guarded advance of a plan (see ScheduleJobManager.advance).
_MS = timedelta(milliseconds=1)


class EnqueueResult(dict[str, str]):
    """The answer of an enqueue: ``{"status": "enqueued" | "deduplicated", "jid": ...}``.

    A dict (docs/design.md#unique-keys) with attribute access. ``jid`` of a deduplicated
    enqueue is the jid of the job holding the unique key.
    """

    @property
    def status(self) -> str:
        """``"enqueued"`` or ``"deduplicated"``."""
        return self["status"]

    @property
    def jid(self) -> str:
        """The new job's jid, or the holder's when deduplicated."""
        return self["jid"]

    @property
    def deduplicated(self) -> bool:
        """Whether an identical job held the unique key and nothing was stored."""
        return self["status"] == "deduplicated"


_NO_DELAY = timedelta(0)


@dataclass(frozen=True)
class JobSpec:
    """A validated job, ready to insert; built by :func:`~django_jobqueue.enqueue.build_job`."""

    using: str
    queue: str
    job_type: str
    payload: Any
    priority: int
    max_retry: int
    timeout_ms: int
    secure: bool
    #: Absolute run time, or None for "now plus ``delay``" by the database clock.
    at: datetime | None
    delay: timedelta
    expires_ms: int | None
    job_id: str | None
    unique_key: str | None
    unique_mode: str
    unique_ttl_ms: int
    #: The payload's JSON text, as checked (:func:`~django_jobqueue.core.validation.json_text`):
    #: the many-row insert sends it rather than encoding the payload again. Not an
    #: ``__init__`` argument, so ``dataclasses.replace`` (a new payload) drops it.
    payload_json: str | None = field(default=None, init=False, compare=False, repr=False)
    #: Who enqueued it (:mod:`django_jobqueue.core.origin`), stored as ``Job.origin``;
    #: set by ``build_job``, not an ``__init__`` argument.
    origin: str = field(default="", init=False, compare=False, repr=False)
    #: The key a partitioned limit counts it under (docs/limits.md), stored as
    #: ``Job.limit_key``; set by ``build_job``, not an ``__init__`` argument.
    limit_key: str = field(default="", init=False, compare=False, repr=False)

    @classmethod
    def of(cls, values: dict[str, Any]) -> JobSpec:
        """Return the spec whose fields are ``values``, a dict it keeps: every field,
        ``payload_json``, ``origin`` and ``limit_key`` too, all validated already (by
        :func:`~django_jobqueue.enqueue.build_job`).

        The frozen ``__init__`` sets each field by its own ``object.__setattr__``
        (about 2 us of the 7 us ``build_job`` took); this takes the dict as it is.

        Raises
        ------
        TypeError
            If a field is missing or unknown.
        """
        if values.keys() != _SPEC_FIELDS:
            raise TypeError(f"JobSpec.of() takes the fields {sorted(_SPEC_FIELDS)}.")
        spec = object.__new__(cls)
        object.__setattr__(spec, "__dict__", values)
        return spec

    def with_payload(self, payload: Any, payload_json: str) -> JobSpec:
        """Return this spec with another payload, already checked (``payload_json`` is
        its :func:`~django_jobqueue.core.validation.json_text`).

        For :func:`~django_jobqueue.enqueue.enqueue_many`, which validates a batch's
        repeated options once: a copy of the fields, not the frozen ``__init__``.
        """
        spec = object.__new__(JobSpec)
        spec.__dict__.update(self.__dict__, payload=payload, payload_json=payload_json)
        return spec

    @property
    def due_now(self) -> bool:
        """Whether the job is due as soon as it commits (no ``at``, no ``delay``)."""
        return self.at is None and self.delay == _NO_DELAY

    def model_fields(self, jid: str) -> dict[str, Any]:
        """Return the ``Job`` fields of this spec, times as database expressions."""
        run_at: Any = self.at if self.at is not None else Now() + self.delay
        return {
            "jid": jid,
            "queue": self.queue,
            "job_type": self.job_type,
            "payload": self.payload,
            "priority": self.priority,
            "max_retry": self.max_retry,
            "timeout_ms": self.timeout_ms,
            "secure": self.secure,
            "run_at": run_at,
            "expires_at": None
            if self.expires_ms is None
            else Now() + timedelta(milliseconds=self.expires_ms),
            "job_id": self.job_id,
            "job_id_hash": None if self.job_id is None else hold_hash(self.job_id),
            "unique_key": self.unique_key,
            "unique_key_hash": None if self.unique_key is None else hold_hash(self.unique_key),
            "unique_mode": self.unique_mode if self.unique_key is not None else "",
            "unique_expires_at": None
            if self.unique_key is None
            else Now() + timedelta(milliseconds=self.unique_ttl_ms),
            # Not the columns' db_default (Django's Now, milliseconds on SQLite):
            # the insert's one instant of the package's clock, as run_at's.
            "created_at": Now(),
            "updated_at": Now(),
            "origin": self.origin,
            "limit_key": self.limit_key,
        }


_SPEC_FIELDS = frozenset(f.name for f in dataclass_fields(JobSpec))


def hold_lock_names(
    queue: str, *, job_id: str | None = None, unique_key: str | None = None
) -> list[str]:
    """Return the creation lock names of an id and a unique key on ``queue``."""
    names = []
    if job_id is not None:
        names.append(f"id\x00{queue}\x00{hold_hash(job_id)}")
    if unique_key is not None:
        names.append(f"uk\x00{queue}\x00{hold_hash(unique_key)}")
    return names


def check_transaction(using: str, conn: Any = None) -> None:
    """Refuse to write jobs on ``using`` while the caller's transaction is on another alias.

    ``conn``: ``using``'s connection, when the caller has it (``connections[using]``).

    Raises
    ------
    WrongDatabase
        If no transaction is open on ``using`` but one is open on another alias: the
        job would not roll back with the caller's data.
    """
    if conn is None:
        conn = connections[using]
    if conn.in_atomic_block or len(connections.settings) < 2:
        return  # no other database to hold the caller's transaction
    for other in connections.all(initialized_only=True):
        if other.alias != using and other.in_atomic_block:
            raise WrongDatabase(
                f"A transaction is open on database {other.alias!r} but jobs are stored on "
                f"{using!r}, so this job would not roll back with your data; open the "
                f"transaction with transaction.atomic(using={using!r}) or set "
                "JOBQUEUE['DATABASE']."
            )


def _refuse(what: str) -> NoReturn:
    raise DirectCreateRefused(
        f"Job.objects.{what}() would make a job without its creation lock, id and "
        "unique-key holds, validation and wake-up; use django_jobqueue.enqueue_job() "
        "(or a django_jobqueue.ids.Queue verb) instead."
    )


class CreateRefusingQuerySet(models.QuerySet[_M]):
    """A queryset whose ``create()`` and ``bulk_create()`` raise ``DirectCreateRefused``.

    ``get_or_create()`` and ``update_or_create()`` create through ``create()``: they
    still find and update existing rows, and refuse only to make one.
    """

    def create(self, **kwargs: Any) -> NoReturn:
        """Refuse: jobs are made by ``enqueue_job``.

        Raises
        ------
        DirectCreateRefused
            Always; nothing is written.
        """
        _refuse("create")

    def bulk_create(self, objs: Any, *args: Any, **kwargs: Any) -> NoReturn:
        """Refuse: jobs are made by ``enqueue_job``.

        Raises
        ------
        DirectCreateRefused
            Always; nothing is written.
        """
        _refuse("bulk_create")


class JobManager(models.Manager[_M]):
    """``Job.objects``: the states' query helpers, and creation under advisory locks."""

    def create_job(self, spec: JobSpec, **hold_fields: Any) -> EnqueueResult:
        """Insert the job of ``spec``, race-free when it carries an id or a unique key.

        Parameters
        ----------
        spec:
            The validated job (:func:`~django_jobqueue.enqueue.build_job`).
        **hold_fields:
            Further ``Job`` fields stored with it (``dedupe_ms``, ``keep_ms``).

        Returns
        -------
        EnqueueResult
            ``enqueued`` with the new jid, or ``deduplicated`` with the jid of the job
            holding the unique key.

        Raises
        ------
        DuplicateJob
            If another job holds ``spec.job_id`` on its queue (docs/design.md#execution).
        LockTimeout
            If a creation lock, or SQLite's write lock, was not had in time.
        WrongDatabase
            If the caller's transaction is open on another alias than the jobs'.

        Implements: docs/design.md#creation, docs/design.md#unique-keys.
        """
        conn = connections[spec.using]  # looked up once, passed down to the insert
        check_transaction(spec.using, conn)
        timeout_ms = get_config().LOCK_TIMEOUT_MS
        return locks.retry_when_locked(
            spec.using, self._create, spec, timeout_ms, hold_fields, conn, timeout_ms=timeout_ms
        )

    def insert_held(self, spec: JobSpec, **hold_fields: Any) -> str:
        """Insert the job of ``spec`` under the creation locks its caller holds; return its jid.

        For the id verbs (:class:`django_jobqueue.ids.Queue`), which hold the
        lock of (queue, id) from :func:`hold_lock_names` for the whole call, read the
        id's holder and end a stale hold before they insert. A due job wakes idle
        workers once the transaction commits.

        Raises
        ------
        IntegrityError
            If a live job holds the id after all (a creator the lock let through).

        Implements: docs/design.md#execution.
        """
        [jid] = new_jids(1)
        self._insert(spec, jid, hold_fields)
        return jid

    def add_unless_held(self, spec: JobSpec, **hold_fields: Any) -> bool | None:
        """PostgreSQL's one-statement ``add``: insert ``spec`` unless its id is held.

        For :meth:`django_jobqueue.ids.Queue.add`: the lock of (queue, id) tried
        without a wait, the holder read and the row inserted in one statement
        (:func:`~django_jobqueue.store.rawkeyed.insert_unless_held`); inside the caller's
        transaction, in a savepoint that a holder rolls back, so the lock is freed.

        Returns
        -------
        bool or None
            True if inserted; False if a live, not cancelled job holds the id; None
            when the verb's own locked path must decide (another database, the lock
            taken by another creator, a stale or cancelled hold, a lost race).

        Raises
        ------
        WrongDatabase
            If the caller's transaction is open on another alias than the jobs'.
        """
        if connections[spec.using].vendor != "postgresql" or spec.job_id is None:
            return None
        check_transaction(spec.using)
        holders = self._pg_fast(spec, new_jids(1)[0], hold_fields)
        if holders is None:
            return True
        if any(holds_id and status != "cancelled" for _jid, status, holds_id, _k in holders):
            return False
        return None

    # -- the create path -------------------------------------------------------

    def _insert(
        self, spec: JobSpec, jid: str, hold_fields: dict[str, Any], conn: Any = None
    ) -> None:
        # The one route into the table: the raw insert of the row the ORM would write
        # (Model.save of spec.model_fields), with a due job's wake-up. conn: the
        # connection of spec.using, when the caller has it.
        insert_rows(
            spec.using,
            [Row(spec, jid, hold_fields)],
            wake_queues=[spec.queue] if spec.due_now else (),
            conn=conn,
        )

    def _pg_fast(
        self, spec: JobSpec, jid: str, hold_fields: dict[str, Any]
    ) -> list[tuple[str, str, bool, bool]] | None:
        """Try lock, holder check and insert as one statement; None: inserted.

        Returns the holders read, empty when the lock was taken by another creator
        or the unique index refused the row (the locked path then decides).
        """
        names = sorted(hold_lock_names(spec.queue, job_id=spec.job_id, unique_key=spec.unique_key))
        keys = [locks.lock_key(name) for name in names]
        row = Row(spec, jid, hold_fields)
        try:
            if not connections[spec.using].in_atomic_block:
                # Autocommit: the statement is its own transaction, and the locks end with it.
                locked, inserted, holders = insert_unless_held(row, keys, wake=spec.due_now)
            else:
                with transaction.atomic(using=spec.using):
                    locked, inserted, holders = insert_unless_held(row, keys, wake=spec.due_now)
                    if not inserted:
                        # Roll the savepoint back: it frees the locks at once.
                        raise _Held(("", ""))
        except _Held:
            pass
        except IntegrityError:
            return []
        if inserted:
            return None
        return holders if locked else []

    def _create(
        self, spec: JobSpec, timeout_ms: int, hold_fields: dict[str, Any], conn: Any = None
    ) -> EnqueueResult:
        [jid] = new_jids(1)
        if spec.job_id is None and spec.unique_key is None:  # no hold: no lock to take
            self._insert(spec, jid, hold_fields, conn)
            return EnqueueResult(status="enqueued", jid=jid)
        names = hold_lock_names(spec.queue, job_id=spec.job_id, unique_key=spec.unique_key)
        if connections[spec.using].vendor == "postgresql":
            holders = self._pg_fast(spec, jid, hold_fields)
            if holders is None:
                return EnqueueResult(status="enqueued", jid=jid)
            for kind, index in (("id", 2), ("unique_key", 3)):
                for found in holders:
                    if found[index]:
                        return _answer_holder(spec, (kind, found[0]))
        holder = self._live_holder(spec)  # the duplicate check: cheap, lock-free
        if holder is not None:
            return _answer_holder(spec, holder)
        for attempt in range(1, _INTEGRITY_RETRIES + 1):
            try:
                with locks.creation_lock(spec.using, names, timeout_ms=timeout_ms):
                    holder = self._live_holder(spec)
                    if holder is not None:
                        # Leave by an exception: the savepoint rolls back, which frees a
                        # PostgreSQL lock now rather than when the caller's transaction ends.
                        raise _Held(holder)
                    self._clear_stale_holds(spec)
                    self._insert(spec, jid, hold_fields)
            except _Held as held:
                return _answer_holder(spec, held.holder)
            except IntegrityError:
                # The unique index caught a creator the locks let through: answer it.
                holder = self._live_holder(spec)
                if holder is not None:
                    return _answer_holder(spec, holder)
                # Its hold ended before we could see it (done, rolled back): try again.
                if attempt == _INTEGRITY_RETRIES or connections[spec.using].needs_rollback:
                    raise
                logger.info("hold gone after a unique violation, retrying queue=%s", spec.queue)
                continue
            break
        return EnqueueResult(status="enqueued", jid=jid)

    def _live_holder(self, spec: JobSpec) -> tuple[str, str] | None:
        """Return ("id" | "unique_key", jid) of a live holder of spec's id or key, if any."""
        id_held = Q(pk__in=[])
        if spec.job_id is not None:
            id_held = Q(job_id_hash=hold_hash(spec.job_id)) & (
                Q(id_held_until__isnull=True) | Q(id_held_until__gt=Now())
            )
        key_held = Q(pk__in=[])
        if spec.unique_key is not None:
            key_held = Q(unique_key_hash=hold_hash(spec.unique_key), unique_expires_at__gt=Now())
        # One query; which hold each row has is computed by the database, so a row whose
        # id hold went stale while its unique key is live answers as the key's holder.
        rows = (
            self.using(spec.using)
            .filter(id_held | key_held, queue=spec.queue)
            .annotate(holds_id=ExpressionWrapper(id_held, output_field=BooleanField()))
            .values_list("jid", "holds_id")
        )
        found = list(rows)
        for jid, holds_id in found:
            if holds_id:
                return "id", jid
        for jid, _holds_id in found:
            return "unique_key", jid
        return None

    def _clear_stale_holds(self, spec: JobSpec) -> None:
        jobs = self.using(spec.using).filter(queue=spec.queue)
        if spec.job_id is not None:
            jobs.filter(job_id_hash=hold_hash(spec.job_id), id_held_until__lte=Now()).update(
                job_id_hash=None, updated_at=Now()
            )
        if spec.unique_key is not None:
            jobs.filter(
                unique_key_hash=hold_hash(spec.unique_key), unique_expires_at__lte=Now()
            ).update(unique_key_hash=None, updated_at=Now())


def id_held(spec: JobSpec, holder_jid: str, index: int | None = None) -> DuplicateJob:
    """Return the DuplicateJob of ``spec``, whose id the job ``holder_jid`` holds
    (``index``: its place in a batch, if it came in one)."""
    return DuplicateJob(
        f"Job id {spec.job_id!r} is already held on queue {spec.queue!r} by job {holder_jid}.",
        holder_jid=holder_jid,
        index=index,
    )


def _answer_holder(spec: JobSpec, holder: tuple[str, str]) -> EnqueueResult:
    kind, jid = holder
    if kind == "id":
        raise id_held(spec, jid)
    logger.debug("deduplicated queue=%s type=%s holder=%s", spec.queue, spec.job_type, jid)
    return EnqueueResult(status="deduplicated", jid=jid)


class _Held(Exception):  # noqa: N818 - control flow, never leaves this module
    """A live holder found under the creation lock: leave the lock's savepoint."""

    def __init__(self, holder: tuple[str, str]) -> None:
        super().__init__(holder)
        self.holder = holder


class ScheduleJobManager(models.Manager[_M]):
    """``ScheduleJob.objects``: plan creation and the guarded advance to the next tick."""

    def create_plan(self, using: str, **fields: Any) -> _M:
        """Insert a plan in its own savepoint on ``using``; return it.

        Parameters
        ----------
        using:
            Database alias of the jobs.
        **fields:
            The ``ScheduleJob`` fields; ``name`` is required and unique.

        Raises
        ------
        DuplicateJob
            If a plan named ``fields["name"]`` exists already. Nothing is written.

        Implements: docs/design.md#plans.
        """
        name = fields["name"]
        try:
            with transaction.atomic(using=using):
                return self.db_manager(using).create(**fields)
        except IntegrityError as exc:
            if not self.using(using).filter(name=name).exists():
                raise
            raise DuplicateJob(
                f"A schedule named {name!r} exists already; choose another name or change it."
            ) from exc

    def advance(self, using: str, pk: int, read_at: datetime, **fields: Any) -> bool:
        """Store ``fields`` on plan ``pk`` if its next run is still ``read_at``.

        The guard is a window of +/- 1 ms around ``read_at`` (the ``schedule_at`` the
        caller read), not equality: a ``schedule_at`` written with Django's own
        ``Now()`` (an admin or a test, not :mod:`dbclock`) is SQLite text with 3
        decimals, which never equals the 6-decimal parameter; the next tick is always
        further away. ``updated_at`` is set by
        the database clock.

        Returns
        -------
        bool
            True if this call moved the plan; False if another process did first.
        """
        advanced = (
            self.using(using)
            .filter(pk=pk, schedule_at__gt=read_at - _MS, schedule_at__lt=read_at + _MS)
            .update(**fields, updated_at=Now())
        )
        return advanced == 1
