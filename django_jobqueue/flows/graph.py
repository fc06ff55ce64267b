"""The ``Workflow`` builder (docs/workflows.md "Workflows"): named steps and their edges.

``w = Workflow("nightly-import")``; ``w.add("fetch", fetch)``; ``w.add("merge",
merge, after=["fetch", "parse"])``; ``w.enqueue()``. The graph is checked when a step
is added (an ``after`` must name a step added before it, so no cycle can be built)
and again as a whole at ``enqueue``. ``enqueue`` writes the workflow, its jobs and
their edges in one transaction (a savepoint inside the caller's): a step with
``after`` is stored ``blocked`` and becomes due in the transaction of its last
upstream job's ``done``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from ..core.exceptions import InvalidOption, InvalidRequest
from ..core.validation import text_problem
from ..enqueue import build_job, jobs_database
from ..models import Job, JobStatus
from ..models import Workflow as WorkflowRow
from ..store.managers import check_transaction
from . import current
from .links import CHUNK, attach, check_policy, wait_many

__all__ = ["Step", "Workflow", "WorkflowResult", "check_name"]

#: Enqueue options a step may not take: a step's job is its own, never a holder's.
_REFUSED = frozenset({"job_id", "unique_key", "unique_mode", "unique_ttl_ms", "after", "batch"})


def check_name(value: Any, what: str) -> str:
    """Return ``value`` if it is 1 to 200 characters without NUL or a lone surrogate.

    Raises
    ------
    InvalidOption
        Otherwise.
    """
    if not isinstance(value, str) or not 1 <= len(value) <= 200:
        raise InvalidOption(f"{what} must be a string of 1 to 200 characters: got {value!r}.")
    problem = text_problem(value)
    if problem is not None:
        raise InvalidOption(f"{what} {problem}: got {value!r}.")
    return value


@dataclass(frozen=True)
class Step:
    """One step of a :class:`Workflow`: its name, job type, payload, options and edges."""

    name: str
    job_type: str
    payload: Any
    options: Mapping[str, Any]
    after: tuple[str, ...]
    on_upstream_failure: str


class WorkflowResult(Mapping[str, str]):
    """What :meth:`Workflow.enqueue` returns: step name -> jid, and the workflow's ``id``."""

    def __init__(self, workflow_id: int, jids: dict[str, str]) -> None:
        self.id = workflow_id
        self._jids = jids

    def __getitem__(self, step: str) -> str:
        return self._jids[step]

    def __iter__(self) -> Any:
        return iter(self._jids)

    def __len__(self) -> int:
        return len(self._jids)

    def __repr__(self) -> str:
        return f"<WorkflowResult {self.id} {self._jids!r}>"


@dataclass
class Workflow:
    """A graph of jobs to enqueue together.

    Parameters
    ----------
    name
        Its name, 1 to 200 characters (shown by the console, filtered by the admin).
    on_upstream_failure
        The default policy of its edges: ``cancel`` (default), ``skip`` or
        ``ignore`` (docs/workflows.md "When an upstream job fails").

    Raises
    ------
    InvalidOption
        If ``name`` or the policy is invalid.
    """

    name: str
    on_upstream_failure: str = "cancel"
    #: The steps added so far, by name, in the order they were added.
    steps: dict[str, Step] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        check_name(self.name, "A workflow's name")
        check_policy(self.on_upstream_failure)

    def add(
        self,
        step: str,
        handle_or_type: Any,
        payload: Any = None,
        after: Iterable[str] = (),
        on_upstream_failure: str | None = None,
        **options: Any,
    ) -> Workflow:
        """Add a step; return the workflow (so calls chain).

        Parameters
        ----------
        step
            Its name, unique in the workflow (1 to 200 characters): the key of
            ``ctx.upstream`` in its dependents and of :meth:`enqueue`'s answer.
        handle_or_type
            A ``JobHandle`` or a registered job type's name.
        payload
            Its job's payload (JSON).
        after
            Names of steps added before this one that it waits for.
        on_upstream_failure
            The policy of these edges; None: the workflow's.
        **options
            Enqueue options of :func:`~django_jobqueue.enqueue.enqueue_job`
            (``queue``, ``priority``, ``delay``, ``max_retry``, ...), but no id or
            unique key.

        Raises
        ------
        InvalidOption
            If the name is taken or invalid, an ``after`` names no earlier step
            (which is also how a cycle is refused), or an option is refused.
        UnknownJobType
            If the job type is not registered.
        """
        check_name(step, "A step's name")
        if step in self.steps:
            raise InvalidOption(f"Workflow {self.name!r} already has a step {step!r}.")
        if isinstance(after, str):
            after = (after,)
        upstream = tuple(dict.fromkeys(after))
        for name in upstream:
            if name not in self.steps:
                raise InvalidOption(
                    f"Step {step!r} comes after {name!r}, which is not a step added before "
                    "it: add steps in an order where each comes after its upstream steps "
                    "(a workflow has no cycle)."
                )
        refused = sorted(_REFUSED & options.keys())
        if refused:
            raise InvalidOption(f"A workflow step takes no {refused}.")
        policy = check_policy(
            self.on_upstream_failure if on_upstream_failure is None else on_upstream_failure
        )
        job_type = getattr(handle_or_type, "name", handle_or_type)
        queue = options.get("queue")
        spec_options = {k: v for k, v in options.items() if k != "queue"}
        build_job(queue, job_type, payload, **spec_options)  # validated now, not at enqueue
        self.steps[step] = Step(step, job_type, payload, dict(options), upstream, policy)
        return self

    def order(self) -> list[Step]:
        """Return the steps in an order where each comes after its upstream steps.

        Raises
        ------
        InvalidOption
            If the graph has a cycle (a ``steps`` mapping changed by hand).
        """
        done: dict[str, None] = {}
        visiting: set[str] = set()

        def visit(name: str, path: tuple[str, ...]) -> None:
            if name in done:
                return
            if name in visiting:
                raise InvalidOption(f"Workflow {self.name!r} has a cycle: {' -> '.join(path)}.")
            if name not in self.steps:
                raise InvalidOption(f"Workflow {self.name!r} has no step {name!r}.")
            visiting.add(name)
            for upstream in self.steps[name].after:
                visit(upstream, (*path, upstream))
            visiting.discard(name)
            done[name] = None

        for name in self.steps:
            visit(name, (name,))
        return [self.steps[name] for name in done]

    async def aenqueue(self) -> WorkflowResult:
        """Async twin of :meth:`enqueue`."""
        return await sync_to_async(self.enqueue)()

    def enqueue(self) -> WorkflowResult:
        """Write the workflow, its jobs and its edges, all or nothing.

        Returns
        -------
        WorkflowResult
            Step name -> jid, and ``.id``, the workflow's id.

        Raises
        ------
        InvalidRequest
            If the workflow has no step.
        InvalidOption, UnknownJobType, InvalidPayload
            If a step is invalid; nothing is written.
        LockTimeout, WrongDatabase
            As ``enqueue_job``; nothing is written.
        """
        from ..bulk import create_many

        steps = self.order()
        if not steps:
            raise InvalidRequest(f"Workflow {self.name!r} has no step to enqueue.")
        using = jobs_database()
        check_transaction(using)
        specs = [
            build_job(
                step.options.get("queue"),
                step.job_type,
                step.payload,
                **{k: v for k, v in step.options.items() if k != "queue"},
            )
            for step in steps
        ]
        with transaction.atomic(using=using):
            row = WorkflowRow(name=self.name, on_upstream_failure=self.on_upstream_failure)
            row.save(using=using)
            results = create_many(specs)
            jids = {step.name: result.jid for step, result in zip(steps, results, strict=True)}
            attach(
                using,
                list(jids.values()),
                workflow_id=row.pk,
                steps={jid: name for name, jid in jids.items()},
            )
            block = current.open_block()
            if block is not None and block.using == using:
                block.jids.extend(jids.values())
            pks: dict[str, int] = {}
            values = list(jids.values())
            for start in range(0, len(values), CHUNK):
                pks.update(
                    Job.objects.using(using)
                    .filter(jid__in=values[start : start + CHUNK])
                    .values_list("jid", "pk")
                )
            waits = [
                (
                    pks[jids[step.name]],
                    {pks[jids[name]]: str(JobStatus.INIT) for name in step.after},
                    step.on_upstream_failure,
                )
                for step in steps
                if step.after
            ]
            wait_many(using, waits)
        return WorkflowResult(row.pk, jids)
