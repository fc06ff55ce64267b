"""Resumable steps: a handler's progress checkpointed on its job's row
(docs/workflows.md "Resumable steps").

A handler names its steps with ``ctx.step(name)`` and decorates the function that
does each one::

    @ctx.step("charge")
    def charge(step):
        return {"charge_id": gateway.charge(order.pk)}

The function runs at once, inside ``transaction.atomic()`` on the jobs' database,
and the decorated name is bound to its return value. Its end is a *checkpoint*: one
``UPDATE`` of the job's ``steps`` column guarded by the job's lease (``processing``
and the claim's ``lease_token``, as every write of :mod:`django_jobqueue.storage`),
in the same transaction as the step's own ORM writes, so both commit or neither
does. A worker that lost its lease cannot checkpoint: its step's writes roll back
and :class:`StepLeaseLost` is raised. ``step.save(cursor)`` is a checkpoint in the
middle of a step: it commits the writes made so far with ``cursor`` and goes on in
a new transaction; the next attempt finds ``step.cursor`` there.

On the next attempt a step that was done is not run again: the decorated name is
bound to the result its run stored. Steps are matched to the recorded ones by
position, and a mismatch (a step renamed, reordered or removed between deploys)
is :class:`StepOrderChanged`, never a silent skip:

- the k-th step an attempt begins must be the k-th recorded step, when there is one;
- a step past the recorded ones must have a name not recorded;
- after a step raised, the attempt may begin only that step again;
- an attempt that returns must have reached every recorded step.

A step that raises rolls back its writes since its last checkpoint, and the error
goes on up: unless the handler catches it, it fails the attempt, which is retried
with the job's own backoff and ``max_retry`` like any other failure.

Why a decorated function and not a ``with`` block: Python runs a ``with`` block's
body whatever its context manager does (only a trace-function hack can skip it),
so a step done by an earlier attempt would run again. A function can be not called.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import connections, transaction
from django.db.models import F
from django.db.models.functions import Coalesce

from ..core.conf import get_config
from ..core.dbclock import Now
from ..core.exceptions import InvalidStep, StepLeaseLost, StepOrderChanged
from ..core.validation import json_text
from ..models import Job, JobStatus
from .connections import check_before_handler

if TYPE_CHECKING:
    from .context import JobContext

__all__ = ["MAX_STEP_NAME", "Step", "StepLog"]

T = TypeVar("T")

#: Longest step name, in characters.
MAX_STEP_NAME = 200


class StepLog:
    """One attempt's view of its job's recorded steps, and where the handler is in them.

    ``recorded`` is the job's ``steps`` column as the claim read it (a list of
    ``{"name", "done", "cursor", "result"}``), updated here after each checkpoint
    commits. ``position`` is the index of the next step the handler may begin.
    """

    def __init__(self, recorded: Any) -> None:
        self.recorded: list[dict[str, Any]] = [dict(entry) for entry in (recorded or [])]
        self.position = 0
        #: The step that raised in this attempt, if any: the only one it may begin next.
        self.failed: str | None = None

    def names(self) -> list[str]:
        """Return the recorded step names in order."""
        return [str(entry["name"]) for entry in self.recorded]

    def begin(self, name: str) -> dict[str, Any] | None:
        """Match the handler's next step ``name`` to the record (module docstring, the
        order rule); return its recorded entry, or None for a step never recorded.

        Raises
        ------
        StepOrderChanged
            If ``name`` breaks the order rule.
        """
        names = self.names()
        if self.failed is not None and name != self.failed:
            raise StepOrderChanged(
                f"Step {name!r} began after step {self.failed!r} raised in the same attempt;"
                f" a step may begin only once the step before it is done, so let"
                f" {self.failed!r}'s error end the attempt (it is retried) or run"
                f" {self.failed!r} again.",
                step=name,
                expected=self.failed,
                recorded=names,
            )
        if self.position < len(names):
            expected = names[self.position]
            if name != expected:
                raise StepOrderChanged(
                    f"Step {name!r} is step {self.position + 1} of this job, but its row"
                    f" recorded {expected!r} there (recorded order: {names}); steps"
                    f" were renamed or reordered since the job's first attempt: keep the"
                    f" old names and order until the job ends, or retry it from a fresh job.",
                    step=name,
                    expected=expected,
                    recorded=names,
                )
            return self.recorded[self.position]
        if name in names:
            raise StepOrderChanged(
                f"Step {name!r} began twice in one handler; its row recorded it at"
                f" position {names.index(name) + 1} (recorded order: {names}); give each"
                f" step its own name.",
                step=name,
                expected="",
                recorded=names,
            )
        return None

    def store(self, entry: dict[str, Any]) -> list[dict[str, Any]]:
        """Return the recorded steps with ``entry`` at the current position."""
        steps = [dict(item) for item in self.recorded]
        if self.position < len(steps):
            steps[self.position] = entry
        else:
            steps.append(entry)
        return steps

    def finish(self) -> None:
        """Check that a returning attempt reached every recorded step.

        Raises
        ------
        StepOrderChanged
            If a recorded step was not reached (removed or renamed since it ran).
        """
        names = self.names()
        if self.position < len(names):
            missing = names[self.position]
            raise StepOrderChanged(
                f"The handler returned without reaching step {missing!r}, which its row"
                f" recorded (recorded order: {names}); a step was removed or renamed"
                f" since the job's first attempt: keep it until the job ends.",
                step="",
                expected=missing,
                recorded=names,
            )


class Step:
    """A resumable step of a running job: ``ctx.step(name)``.

    Decorate the function that does the step with it; the function is called at
    once with this step (``func(step)``) unless an earlier attempt finished it, and
    the decorated name is bound to its (stored) return value.

    Attributes
    ----------
    name:
        The step's name, unique within its job, 1 to 200 characters.
    done:
        True when an earlier attempt finished this step: its function is not called.
    cursor:
        The JSON value the last :meth:`save` stored, None before any.
    result:
        The step's return value once it ended (the stored one for a done step).

    Implements: docs/workflows.md "Resumable steps".
    """

    def __init__(self, ctx: JobContext, name: str) -> None:
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_STEP_NAME:
            raise InvalidStep(
                f"Step name {name!r} is not a string of 1 to {MAX_STEP_NAME} characters;"
                " name each step of a handler with a short fixed string."
            )
        self._ctx = ctx
        self.name = name
        self.done = False
        self.cursor: Any = None
        self.result: Any = None
        self._using = ""
        self._atomic: Any = None
        self._entered = False

    def __repr__(self) -> str:
        return f"<Step {self.name!r} of jid={self._ctx.jid} done={self.done}>"

    def __enter__(self) -> Step:
        raise InvalidStep(
            f"ctx.step({self.name!r}) is not a with block: Python runs a with block's body"
            " even when its step is done, so decorate a function instead:"
            f" @ctx.step({self.name!r}) def result(step): ..."
        )

    def __exit__(self, *exc: object) -> None:  # pragma: no cover (never entered)
        return None

    def __call__(self, func: Callable[[Step], T]) -> T:
        """Run ``func(self)`` as this step unless it is done; return its result.

        Parameters
        ----------
        func:
            The step's work; it takes this step and returns a JSON value (or None).
            Its ORM writes on the jobs' database commit with the step's checkpoint.

        Returns
        -------
        Any
            The step's result: ``func``'s return value as JSON gives it back (so a
            fresh run and a resumed one see the same value), or, for a done step,
            the value its run stored.

        Raises
        ------
        StepOrderChanged
            If ``self.name`` breaks the order rule (module docstring).
        StepLeaseLost
            If the job is no longer leased to this worker; the step's writes since
            its last checkpoint are rolled back.
        InvalidStep
            If the jobs' database is inside a ``transaction.atomic()`` already (the
            checkpoint must commit with the step's writes, not with the caller's),
            or the result is not JSON.
        Exception
            What ``func`` raised, its writes since the last checkpoint rolled back.
        """
        log = self._ctx.step_log
        entry = log.begin(self.name)
        if entry is not None:
            self.cursor = entry.get("cursor")
            if entry.get("done"):
                self.done = True
                self.result = entry.get("result")
                log.position += 1
                log.failed = None
                return self.result
        self._using = self._ctx.job._state.db or "default"
        if connections[self._using].in_atomic_block:
            raise InvalidStep(
                f"Step {self.name!r} began inside a transaction.atomic() on the jobs'"
                f" database {self._using!r}; its checkpoint must commit with the step's"
                " own writes, so begin the step outside any atomic() block."
            )
        self._check_lease()
        # The step's BEGIN is no statement the handler's idle check sees: a connection
        # that died while the handler computed is replaced before it (worker.connections).
        check_before_handler()
        log.failed = self.name
        atomic = transaction.atomic(using=self._using)
        atomic.__enter__()
        self._atomic = atomic
        self._entered = True
        try:
            value = func(self)
            result = json.loads(self._json(value, "result"))
            stored = {"name": self.name, "done": True, "cursor": self.cursor, "result": result}
            self._checkpoint(stored)
        except BaseException as exc:
            self._entered = False
            atomic, self._atomic = self._atomic, None
            if atomic is not None:  # None: a save()'s COMMIT failed, and rolled back
                atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise
        self._entered = False
        atomic, self._atomic = self._atomic, None
        atomic.__exit__(None, None, None)  # COMMIT: the writes and the checkpoint
        log.recorded = log.store(stored)
        log.position += 1
        log.failed = None
        self.done = True
        self.result = result
        return self.result

    def save(self, cursor: Any) -> None:
        """Checkpoint this step now: commit its writes so far with ``cursor``.

        Call it from the step's function, outside any ``atomic()`` of its own. The
        step then goes on in a new transaction; if the attempt ends before the step
        does, the next attempt runs the step's function again with
        :attr:`cursor` set to this value, and the writes made after this call are
        rolled back.

        Parameters
        ----------
        cursor:
            Where the step got to, as JSON (an offset, a last pk, a dict), at most
            ``MAX_RESULT_BYTES`` bytes.

        Raises
        ------
        InvalidStep
            If called outside the step's function, inside an ``atomic()`` block the
            function opened, or with a ``cursor`` that is not JSON.
        StepLeaseLost
            If the job is no longer leased to this worker (the writes since the last
            checkpoint are rolled back when the exception leaves the step).
        """
        if not self._entered:
            raise InvalidStep(
                f"step.save() was called outside the function of step {self.name!r}; call"
                " it from the decorated function while the step runs."
            )
        conn = connections[self._using]
        if len(conn.atomic_blocks) != 1:
            raise InvalidStep(
                f"step.save() was called inside an atomic() block opened in step"
                f" {self.name!r}; a checkpoint commits the step's transaction, so call it"
                " outside such blocks."
            )
        text = self._json(cursor, "cursor")
        value = json.loads(text)
        saved = {"name": self.name, "done": False, "cursor": value, "result": None}
        self._checkpoint(saved)
        atomic, self._atomic = self._atomic, None
        atomic.__exit__(None, None, None)  # COMMIT: the writes so far and the cursor
        log = self._ctx.step_log
        log.recorded = log.store(saved)
        self.cursor = value
        atomic = transaction.atomic(using=self._using)
        atomic.__enter__()  # the rest of the step: a new transaction
        self._atomic = atomic

    def _json(self, value: Any, what: str) -> str:
        try:
            return json_text(
                value,
                f"The {what} of step {self.name!r}",
                max_bytes=get_config().MAX_RESULT_BYTES,
                setting="MAX_RESULT_BYTES",
            )
        except ValueError as exc:
            raise InvalidStep(str(exc)) from exc

    def _check_lease(self) -> None:
        if self._ctx.lease_lost:
            raise StepLeaseLost(
                f"Step {self.name!r} of job {self._ctx.jid} did not begin: this worker lost"
                " the job's lease (reaped, timed out or handed back), so another attempt"
                " owns it."
            )

    def _checkpoint(self, entry: dict[str, Any]) -> None:
        """Store the recorded steps with ``entry``, guarded by the job's lease, in the
        step's transaction (storage's guard: ``processing`` and the claim's token)."""
        job = self._ctx.job
        steps = self._ctx.step_log.store(entry)
        updated = (
            Job.objects.using(self._using)
            .filter(pk=job.pk, status=JobStatus.PROCESSING, lease_token=job.lease_token)
            # A checkpoint is a write of the started job: its start is stored at the
            # latest here, as an outcome stores it (storage), so a worker killed
            # after a step has spent its attempt (reaping.reap_expired).
            .update(
                steps=steps,
                started_at=Coalesce(F("started_at"), F("heartbeat_at")),
                updated_at=Now(),
            )
        )
        if not updated:
            self._ctx.mark_lease_lost()
            raise StepLeaseLost(
                f"Step {self.name!r} of job {self._ctx.jid} could not checkpoint: this"
                " worker lost the job's lease (reaped, timed out or handed back), so its"
                " writes since the last checkpoint were rolled back."
            )
