"""The audit log of operators' actions (docs/console.md "Audit log").

Policy
------
Every action an operator takes on jobs, queues, schedules or gateway tokens, from the
console, the admin, ``manage.py jobqueue`` or the gateway, is one
:class:`~django_jobqueue.models.AuditEntry`: who (:class:`Actor`), when (the
database's clock), what (the action and its target), how many rows it changed, and
the jids acted on (up to :data:`MAX_JIDS`).

The row is written in the transaction of the action it records
(:func:`run_audited`), so an action that rolls back leaves no row and a row never
claims an action that did not happen. An action done in batches (a bulk retry over
a filter) writes its row with the first batch and adds each later batch's counts in
that batch's own transaction (:class:`BatchAudit`): the row's count is always what
has been committed. ``jobqueue prune``, many short transactions by design, records
its totals once it is done.

Rows older than ``JOBQUEUE["AUDIT_KEEP"]`` (default 90 days) are deleted by
``jobqueue prune`` (:func:`prune_audit`). The console reads newest first by the
primary key (:func:`audit_page`), never counting the table.
"""

from __future__ import annotations

import getpass
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from django.db.models import F

from ..core.conf import get_config
from ..core.dbclock import Now
from ..models import AuditEntry
from . import locks

__all__ = [
    "MAX_JIDS",
    "SOURCES",
    "Actor",
    "BatchAudit",
    "audit_page",
    "cli_actor",
    "entries_for_job",
    "prune_audit",
    "record",
    "run_audited",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Where an action comes from.
SOURCES = ("console", "admin", "cli", "gateway")
#: Jids listed on one row at most; an action on more lists the first ones.
MAX_JIDS = 1_000
#: Rows per DELETE of :func:`prune_audit`.
PRUNE_BATCH = 1_000


@dataclass(frozen=True)
class Actor:
    """Who acts: a surface and a name on it."""

    #: One of :data:`SOURCES`.
    source: str
    #: A user name, the CLI's operating-system user, or a gateway token's name.
    name: str

    def __str__(self) -> str:
        return f"{self.source}:{self.name}" if self.name else self.source


def cli_actor() -> Actor:
    """Return the actor of ``manage.py jobqueue``: ``cli`` and the operating-system user."""
    try:
        name = getpass.getuser()
    except (KeyError, OSError):  # no user name in the environment or passwd
        name = ""
    return Actor("cli", name)


def record(
    using: str,
    actor: Actor,
    action: str,
    *,
    target: str = "",
    detail: Mapping[str, int] | None = None,
    count: int | None = None,
    jids: Iterable[str] = (),
) -> AuditEntry:
    """Write one audit row on ``using``; call it inside the action's transaction.

    Parameters
    ----------
    using
        Database alias of the jobs.
    actor
        Who acts.
    action
        The verb (``retry``, ``cancel``, ``delete``, ``pause``, ``resume``, ...).
    target
        What was acted on, in words (cut to 300 characters).
    detail
        The counts behind ``count`` (``{"failed": 2, "waiting": 1}``).
    count
        Rows changed; None: the sum of ``detail``.
    jids
        The jobs acted on; the first :data:`MAX_JIDS` are stored.

    Returns
    -------
    AuditEntry
        The row written.

    Raises
    ------
    ValueError
        If ``actor.source`` is not one of :data:`SOURCES`.
    """
    if actor.source not in SOURCES:
        raise ValueError(f"An audit source must be one of {SOURCES}: got {actor.source!r}.")
    detail = dict(detail or {})
    listed = list(jids)[:MAX_JIDS]
    entry = AuditEntry(
        source=actor.source,
        actor=actor.name[:200],
        action=action[:32],
        target=target[:300],
        count=sum(detail.values()) if count is None else count,
        detail=detail,
        jids=",".join(listed),
    )
    entry.save(using=using)
    logger.info(
        "audit source=%s actor=%s action=%s target=%s count=%s",
        actor.source,
        actor.name,
        action,
        target,
        entry.count,
    )
    return entry


def run_audited(
    using: str,
    work: Callable[[], T],
    actor: Actor,
    action: str,
    *,
    target: str = "",
    counts: Callable[[T], Mapping[str, int]] = lambda result: {},
    jids: Iterable[str] | Callable[[], Iterable[str]] = (),
) -> T:
    """Run ``work()`` and write its audit row in one write transaction on ``using``.

    Parameters
    ----------
    work
        The action; its writes join the transaction.
    counts
        Its result's counts, for the row's ``detail`` and ``count``.
    jids
        The jobs acted on, or a callable that reads them inside the transaction
        (before ``work`` runs).

    Returns
    -------
    T
        What ``work`` returned.

    Raises
    ------
    LockTimeout
        If the database stayed locked (SQLite) or deadlocked twice (MySQL); nothing
        was written, neither the action nor its row.
    """
    listed = jids

    def once() -> T:
        with locks.write_transaction(using):
            acted_on = list(listed() if callable(listed) else listed)
            result = work()
            record(using, actor, action, target=target, detail=counts(result), jids=acted_on)
            return result

    return locks.retry_when_locked(using, once)


class BatchAudit:
    """The audit row of an action done in batches, each batch its own transaction.

    The first :meth:`run` writes the row; each later one adds its counts (and jids,
    up to :data:`MAX_JIDS`) to it in its own transaction.
    """

    def __init__(self, using: str, actor: Actor, action: str, *, target: str = "") -> None:
        self.using = using
        self.actor = actor
        self.action = action
        self.target = target
        #: The row, once the first batch committed.
        self.entry_pk: int | None = None
        #: Counts committed so far.
        self.totals: dict[str, int] = {}
        self._jids: list[str] = []

    def run(self, work: Callable[[], Mapping[str, int]], jids: list[str]) -> Mapping[str, int]:
        """Run one batch ``work()`` (returning its counts) and account for it.

        Raises
        ------
        LockTimeout
            As :func:`run_audited`; the batch and its accounting rolled back.
        """

        def once() -> tuple[Mapping[str, int], dict[str, int], list[str], int]:
            with locks.write_transaction(self.using):
                counts = work()
                totals = dict(self.totals)
                for key, number in counts.items():
                    totals[key] = totals.get(key, 0) + number
                listed = (self._jids + jids)[:MAX_JIDS]
                if self.entry_pk is None:
                    pk = record(
                        self.using,
                        self.actor,
                        self.action,
                        target=self.target,
                        detail=totals,
                        jids=listed,
                    ).pk
                else:
                    pk = self.entry_pk
                    AuditEntry.objects.using(self.using).filter(pk=pk).update(
                        count=F("count") + sum(counts.values()),
                        detail=totals,
                        jids=",".join(listed),
                    )
                return counts, totals, listed, pk

        counts, totals, listed, pk = locks.retry_when_locked(self.using, once)
        self.totals, self._jids, self.entry_pk = totals, listed, pk
        return counts

    def finish(self) -> None:
        """Write the row of an action whose batches found nothing to act on."""
        if self.entry_pk is None:
            self.run(dict, [])


def audit_page(using: str, *, before: int | None = None, limit: int = 50) -> list[AuditEntry]:
    """Return up to ``limit`` rows newest first, older than the row ``before`` (a pk).

    Keyset pagination on the primary key: no count, no OFFSET.
    """
    rows = AuditEntry.objects.using(using).order_by("-pk")
    if before is not None:
        rows = rows.filter(pk__lt=before)
    return list(rows[:limit])


def entries_for_job(using: str, jid: str, *, since: Any, limit: int = 100) -> list[AuditEntry]:
    """Return the audit rows that list ``jid``, oldest first, written at or after ``since``.

    ``since`` (the job's creation, an aware datetime) bounds the rows read by the
    time index; the jids are then matched as text.
    """
    rows = (
        AuditEntry.objects.using(using)
        .filter(at__gte=since - timedelta(seconds=1), jids__contains=jid)
        .order_by("at", "pk")
    )
    return list(rows[:limit])


def prune_audit(using: str, *, keep: timedelta | None = None, dry_run: bool = False) -> int:
    """Delete the audit rows older than ``keep`` (None: ``JOBQUEUE["AUDIT_KEEP"]``).

    In batches of :data:`PRUNE_BATCH`, each its own statement; returns how many rows
    went (or would, with ``dry_run``).
    """
    keep = get_config().AUDIT_KEEP if keep is None else keep
    old = AuditEntry.objects.using(using).filter(at__lt=Now() - keep)
    if dry_run:
        return old.count()
    deleted = 0
    while True:
        pks = list(old.order_by("pk").values_list("pk", flat=True)[:PRUNE_BATCH])
        if not pks:
            return deleted
        count, _ = locks.retry_when_locked(
            using,
            lambda: AuditEntry.objects.using(using).filter(pk__in=pks).delete(),  # noqa: B023
        )
        deleted += count
        if len(pks) < PRUNE_BATCH:
            return deleted
