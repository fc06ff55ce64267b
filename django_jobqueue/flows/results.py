"""What a dependent reads of its upstream jobs: ``ctx.upstream[step]`` (docs/workflows.md)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..models import Dependency, Job

__all__ = ["Upstream", "upstream_results"]


class Upstream(Mapping[str, Any]):
    """The results of a job's upstream jobs: step name (else jid) -> result (JSON).

    ``jids`` maps the same keys to the upstream jobs' jids, ``statuses`` to their
    stored statuses (a dependent run under ``ignore`` may find a dead one).
    """

    def __init__(self, rows: list[tuple[str, str, str, Any]]) -> None:
        self._results: dict[str, Any] = {}
        self.jids: dict[str, str] = {}
        self.statuses: dict[str, str] = {}
        for jid, step, status, result in rows:
            key = step or jid
            self._results[key] = result
            self.jids[key] = jid
            self.statuses[key] = status

    def __getitem__(self, step: str) -> Any:
        try:
            return self._results[step]
        except KeyError:
            raise KeyError(
                f"{step!r} is not an upstream step of this job; its upstream steps are "
                f"{sorted(self._results)}"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._results)

    def __len__(self) -> int:
        return len(self._results)

    def __repr__(self) -> str:
        return f"<Upstream {sorted(self._results)}>"


def upstream_results(job: Job) -> Upstream:
    """Read the upstream jobs of ``job`` (one query over its edges), in pk order."""
    using = job._state.db or "default"
    upstream = Dependency.objects.using(using).filter(dependent_id=job.pk).values("upstream_id")
    rows = (
        Job.objects.using(using)
        .filter(pk__in=upstream)
        .order_by("pk")
        .values_list("jid", "step", "status", "result")
    )
    return Upstream(list(rows))
