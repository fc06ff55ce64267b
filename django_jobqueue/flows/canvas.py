"""Celery's canvas over workflows (docs/celery.md): signatures, chain, group, chord.

``handle.s(payload, **options)`` is a :class:`Signature`: a job not enqueued yet.
``chain(a, b, c)`` runs each after the one before (a failure cancels the rest);
``group(a, b, c)`` runs them side by side; ``chord(group(a, b), c)`` runs ``c``
after every member of the group. Each is sugar over a :class:`~.graph.Workflow`
(its ``enqueue()`` answers a :class:`~.graph.WorkflowResult`); a member of a chain
may be a group (fan-out, then fan-in for the next link). A job reads its upstream
results as ``ctx.upstream[step]``, where a step is named ``<index>.<job type>``
(``"0.images.fetch"``), or the ``step`` option a signature was given.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.exceptions import InvalidOption
from .graph import Workflow, WorkflowResult

__all__ = ["Chain", "Chord", "Group", "Signature", "chain", "chord", "group", "signature"]


@dataclass(frozen=True)
class Signature:
    """A job to enqueue later: job type, payload and enqueue options.

    ``options`` may hold ``step`` (its step name in the workflow it becomes part
    of) and ``on_upstream_failure`` besides the enqueue options.
    """

    job_type: str
    payload: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __or__(self, other: Any) -> Chain:
        """``a.s() | b.s()``: Celery's spelling of ``chain(a.s(), b.s())``."""
        return Chain(self, other)

    def enqueue(self) -> Any:
        """Enqueue it alone, now; see ``enqueue_job``. Returns an ``EnqueueResult``."""
        from ..enqueue import enqueue_job

        options = {k: v for k, v in self.options.items() if k != "step"}
        queue = options.pop("queue", None)
        return enqueue_job(queue, self.job_type, self.payload, **options)


def signature(handle_or_type: Any, payload: Any = None, **options: Any) -> Signature:
    """Return the :class:`Signature` of a job of ``handle_or_type`` (``handle.s(...)``)."""
    return Signature(getattr(handle_or_type, "name", handle_or_type), payload, dict(options))


class _Canvas(ABC):
    """A chain, group or chord: steps to add to a workflow."""

    name = "canvas"

    def workflow(self, name: str | None = None) -> Workflow:
        """Return the :class:`Workflow` this builds (not enqueued)."""
        flow = Workflow(name or self.name)
        self.add_to(flow, after=(), counter=[0])
        return flow

    def enqueue(self, name: str | None = None) -> WorkflowResult:
        """Enqueue it as one workflow named ``name`` (default: the canvas' kind)."""
        return self.workflow(name).enqueue()

    async def aenqueue(self, name: str | None = None) -> WorkflowResult:
        """Async twin of :meth:`enqueue`."""
        return await self.workflow(name).aenqueue()

    def __or__(self, other: Any) -> Chain:
        """``canvas | b.s()``: Celery's spelling of ``chain(canvas, b.s())``."""
        return Chain(self, other)

    @abstractmethod
    def add_to(
        self, flow: Workflow, *, after: tuple[str, ...], counter: list[int]
    ) -> tuple[str, ...]:
        """Add this canvas' steps to ``flow``, the first ones after the steps ``after``;
        return the names of its last steps (what comes next waits for them).
        ``counter`` numbers the steps that have no ``step`` name of their own."""


def _add_signature(
    flow: Workflow, sig: Signature, after: tuple[str, ...], counter: list[int]
) -> tuple[str, ...]:
    options = dict(sig.options)
    step = options.pop("step", None) or f"{counter[0]}.{sig.job_type}"
    counter[0] += 1
    policy = options.pop("on_upstream_failure", None)
    flow.add(step, sig.job_type, sig.payload, after=after, on_upstream_failure=policy, **options)
    return (step,)


def _member(item: Any) -> Signature | _Canvas:
    if isinstance(item, Signature | _Canvas):
        return item
    raise InvalidOption(
        f"A chain, group or chord takes signatures (handle.s(...)) and canvases: "
        f"got {type(item).__name__}."
    )


def _add(
    flow: Workflow, item: Signature | _Canvas, after: tuple[str, ...], counter: list[int]
) -> tuple[str, ...]:
    if isinstance(item, Signature):
        return _add_signature(flow, item, after, counter)
    return item.add_to(flow, after=after, counter=counter)


class Chain(_Canvas):
    """Each member after the one before; see :func:`chain`."""

    name = "chain"

    def __init__(self, *members: Any) -> None:
        if not members:
            raise InvalidOption("A chain needs at least one signature.")
        self.members = [_member(m) for m in members]

    def add_to(
        self, flow: Workflow, *, after: tuple[str, ...], counter: list[int]
    ) -> tuple[str, ...]:
        for member in self.members:
            after = _add(flow, member, after, counter)
        return after


class Group(_Canvas):
    """Members side by side; see :func:`group`."""

    name = "group"

    def __init__(self, *members: Any) -> None:
        if len(members) == 1 and not isinstance(members[0], Signature | _Canvas):
            members = tuple(members[0])  # group([a, b]) as Celery takes it
        if not members:
            raise InvalidOption("A group needs at least one signature.")
        self.members = [_member(m) for m in members]

    def add_to(
        self, flow: Workflow, *, after: tuple[str, ...], counter: list[int]
    ) -> tuple[str, ...]:
        ends: list[str] = []
        for member in self.members:
            ends.extend(_add(flow, member, after, counter))
        return tuple(ends)


class Chord(_Canvas):
    """A group, then a callback after all its members; see :func:`chord`."""

    name = "chord"

    def __init__(self, header: Any, body: Any) -> None:
        self.header = header if isinstance(header, Group) else Group(header)
        self.body = _member(body)

    def add_to(
        self, flow: Workflow, *, after: tuple[str, ...], counter: list[int]
    ) -> tuple[str, ...]:
        ends = self.header.add_to(flow, after=after, counter=counter)
        return _add(flow, self.body, ends, counter)


def chain(*signatures: Any) -> Chain:
    """Run ``signatures`` one after another: each waits for the one before it.

    A member may be a :func:`group` (all its members after the link before, the
    next link after all of them). A failed link cancels the links after it (the
    ``cancel`` policy; give a signature ``on_upstream_failure="ignore"`` to run
    it anyway). ``.enqueue()`` writes it as one workflow.

    Raises
    ------
    InvalidOption
        If empty, or a member is not a signature, group, chain or chord.
    """
    return Chain(*signatures)


def group(*signatures: Any) -> Group:
    """Run ``signatures`` side by side (also ``group([a, b])``); ``.enqueue()`` writes them."""
    return Group(*signatures)


def chord(header: Any, body: Any) -> Chord:
    """Run ``body`` after every member of ``header`` (a group, or a list of signatures).

    ``body`` reads their results as ``ctx.upstream[step]``.
    """
    return Chord(header, body)
