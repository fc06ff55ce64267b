"""Operators' job actions run in audited batches (docs/console.md "Audit log").

The console, the admin and ``manage.py jobqueue`` act on a selection of jobs through
:func:`act_in_batches`: the :mod:`~django_jobqueue.maintenance` function of the
action, ``batch_size`` jobs per write transaction, each batch accounted for in the
action's one audit row in that same transaction.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from django.db.models import QuerySet

from .maintenance import cancel_jobs, check_batch_size, delete_jobs, retry_jobs
from .models import Job
from .store.audit import Actor, BatchAudit

__all__ = ["OPERATOR_ACTIONS", "act_in_batches"]

#: The job actions an operator runs in batches, by name: each returns its counts.
OPERATOR_ACTIONS: dict[str, Any] = {
    "retry": lambda jobs: retry_jobs(jobs),
    "cancel": lambda jobs: cancel_jobs(jobs),
    "delete": lambda jobs: delete_jobs(jobs),
}


def act_in_batches(
    jobs: QuerySet[Job],
    action: str,
    actor: Actor,
    *,
    target: str,
    batch_size: int = 500,
) -> dict[str, int]:
    """Apply an operator's ``action`` (retry, cancel, delete) to ``jobs``, audited.

    Walks the primary keys in order (keyset), ``batch_size`` at a time, so no
    statement names more than ``batch_size`` jobs and no transaction is long; each
    batch is one write transaction that also accounts for it in the action's audit
    row (:class:`~django_jobqueue.store.audit.BatchAudit`, docs/console.md "Audit log").

    Parameters
    ----------
    jobs
        Any queryset of jobs; those the action does not apply to are left alone.
    action
        ``retry``, ``cancel`` or ``delete``.
    actor
        Who acts (console, admin, cli or gateway, and a name).
    target
        What is acted on, in words, for the audit row ("job <jid>", "12 jobs").
    batch_size
        Jobs per batch, >= 1.

    Returns
    -------
    dict
        The summed counts: ``dead``/``waiting`` (retry), ``cancelled``/``requested``
        (cancel), ``deleted``/``running`` (delete).

    Raises
    ------
    KeyError
        If ``action`` is not one of :data:`OPERATOR_ACTIONS`.
    ValueError
        If ``batch_size`` is not an integer >= 1.
    """
    check_batch_size(batch_size)
    work = OPERATOR_ACTIONS[action]
    using = jobs.db
    audit = BatchAudit(using, actor, action, target=target)
    last = 0
    while True:
        rows = list(jobs.filter(pk__gt=last).order_by("pk").values_list("pk", "jid")[:batch_size])
        if not rows:
            audit.finish()
            return audit.totals
        pks = [pk for pk, _jid in rows]

        def batch(pks: list[int] = pks) -> dict[str, int]:
            return _counts(work(Job.objects.using(using).filter(pk__in=pks)))

        audit.run(batch, [jid for _pk, jid in rows])
        last = pks[-1]


def _counts(outcome: Any) -> dict[str, int]:
    return {key: int(number) for key, number in asdict(outcome).items()}
