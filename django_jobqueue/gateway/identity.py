"""Worker names: a gateway worker's name belongs to the token that registered it.

``POST /sdk/worker/register`` stores the token on the worker's row
(``Worker.owner_token``). From then on another token may not re-register that
name (which would change its queues), claim under it or stop it: ``403
forbidden``, unless the other token has the ``admin`` scope on every queue of the
worker (on ``*`` for a ``runworkers`` foreman, whose empty queue list is every
queue). A name whose owner token was revoked, expired or deleted is free: the next
token to register it owns it (a token rotation keeps its workers' names). A row
registered before owners were stored has none and is free the same way. See
docs/gateway.md "Worker names".

A ``work`` token that registers with no name gets one made here:
``<token name>-<12 hex digits>``, returned in the answer.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from typing import Any

from django.db import IntegrityError, transaction

from ..models import ApiToken, Worker
from ..store import apitokens, workerstats
from .errors import GatewayError

__all__ = ["check_may_act", "generated_name", "register_owned"]


def generated_name(token: ApiToken) -> str:
    """Return a fresh worker name for ``token``: its name, ``-`` and 12 hex digits."""
    return f"{token.name[:180]}-{secrets.token_hex(6)}"


def _admin_over(token: ApiToken, queues: Iterable[str]) -> bool:
    """Whether ``token`` has ``admin`` on each of ``queues`` (none: every queue)."""
    if "admin" not in token.scopes:
        return False
    queues = list(queues)
    if not queues:
        return "*" in token.queues
    return all(apitokens.queue_allowed(token, queue) for queue in queues)


def _owner_live(row: Worker) -> bool:
    return row.owner_token is not None and apitokens.is_live(row.owner_token)


def _refused(row: Worker) -> GatewayError:
    whose = "a runworkers foreman" if row.kind != "gateway" else "another token"
    return GatewayError(
        "forbidden",
        f"Worker {row.name!r} is registered by {whose}; register under another name, or "
        "use a token with the admin scope on each of its queues.",
        field="name",
    )


def check_may_act(token: ApiToken, row: Worker) -> bool:
    """Return whether ``token`` may act as worker ``row`` and would take its name.

    Returns
    -------
    bool
        True when the name is free (no live owner, gateway kind): acting on it makes
        ``token`` its owner. False when ``token`` owns it or is an admin over it.

    Raises
    ------
    GatewayError
        ``forbidden`` (403) when the name is another live token's, or a
        ``runworkers`` foreman's, and ``token`` is not an admin over its queues.
    """
    if row.kind == "gateway" and row.owner_token_id == token.pk:
        return False
    if row.kind == "gateway" and not _owner_live(row):
        return True
    if _admin_over(token, row.queues):
        return False
    raise _refused(row)


def register_owned(using: str, token: ApiToken, name: str, **fields: Any) -> None:
    """Register (or refresh) gateway worker ``name`` for ``token``.

    ``fields`` are :func:`~django_jobqueue.store.workerstats.register_worker`'s
    keyword arguments (host, pid, queues, ...). The row is made first under
    ``token`` (a concurrent registration of the same new name loses to it), then
    locked and checked with :func:`check_may_act`, then refreshed; all in one
    transaction, so a refused registration changes nothing.

    Raises
    ------
    GatewayError
        ``forbidden`` (403), as :func:`check_may_act`.
    InvalidOption
        As ``register_worker`` (a name over 200 characters).
    """
    workers = Worker.objects.using(using)
    with transaction.atomic(using=using):
        try:
            with transaction.atomic(using=using):
                workers.create(
                    name=name, kind="gateway", owner_token=token, queues=sorted(fields["queues"])
                )
        except IntegrityError:
            pass  # the name is registered: its owner decides below
        row = workers.select_for_update().get(name=name)
        takes = check_may_act(token, row)
        workerstats.register_worker(using, name, kind="gateway", **fields)
        if takes:
            workers.filter(pk=row.pk).update(owner_token=token)
