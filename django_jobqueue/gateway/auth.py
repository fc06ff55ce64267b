"""Access: bearer tokens (:mod:`django_jobqueue.store.apitokens`), scopes, queues and rate.

Bearer auth only: no cookie or session is read, so CSRF does not apply. A missing,
malformed, unknown, revoked or expired token answers 401; a token without the route's
scope, or not allowed the queue it names, 403. With
``JOBQUEUE["GATEWAY"]["RATE_PER_MINUTE"]`` set, a token's requests are counted per
minute in Django's default cache (shared by every process when the cache is), and
one over the rate answers 429 with ``Retry-After``.

The check runs where the view runs: in the view's thread for a sync view; for an
``async`` view (the claim) under ASGI, in the claim pool (:mod:`.pools`), so a
burst of claims neither makes a thread per request nor takes a producer's thread
or connection; under WSGI, in the request's thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Iterable
from typing import Any

from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest
from ninja.security import HttpBearer

from ..core.conf import get_config
from ..models import ApiToken
from ..store import apitokens
from ..store.audit import Actor
from . import pools
from .body import declared_length
from .errors import GatewayError, unauthorized

__all__ = ["BearerToken", "actor_of", "origin_of", "require", "token_of"]


class BearerToken(HttpBearer):
    """django-ninja auth: ``Authorization: Bearer jqt_...`` to an :class:`ApiToken`.

    Both sync and async: django-ninja calls it in the event loop for an ``async``
    view (``is_async``) and awaits the coroutine it then returns; in a thread (a sync
    view) it checks at once.
    """

    def __init__(self) -> None:
        super().__init__()
        # django-ninja: call it without ``sync_to_async`` for async views (its
        # ``__init__`` sets False, as ``authenticate`` is a plain ``def``).
        self.is_async = True

    def __call__(self, request: HttpRequest) -> Any:
        """Return the token (a coroutine of it in an event loop's thread).

        Raises
        ------
        GatewayError
            ``body_too_large`` (413), ``unauthorized`` (401), ``rate_limited`` (429).
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return self.check(request)
        return self._check_async(request)

    def _check_async(self, request: HttpRequest) -> Coroutine[Any, Any, Any]:
        if isinstance(request, ASGIRequest):
            return pools.in_pool(pools.claim_pool, self.check, request)
        return sync_to_async(self.check)(request)  # WSGI: the request's thread

    def check(self, request: HttpRequest) -> Any:
        """Check the body's declared size first, then the token (401 when absent)."""
        limit = get_config().GATEWAY.MAX_BODY_BYTES
        if declared_length(request) > limit:
            raise GatewayError(
                "body_too_large", f"The request body is over {limit} bytes.", field="body"
            )
        return super().__call__(request)

    def authenticate(self, request: HttpRequest, token: str) -> ApiToken | None:
        """Return the live token, after counting it against the rate; None: 401."""
        row = apitokens.authenticate(token)
        if row is None:
            raise unauthorized("The token is unknown, revoked or expired.")
        _count_rate(row)
        return row


def _count_rate(token: ApiToken) -> None:
    rate = get_config().GATEWAY.RATE_PER_MINUTE
    if not rate:
        return
    minute = int(time.time() // 60)
    key = f"django_jobqueue:gateway:rate:{token.pk}:{minute}"
    cache.add(key, 0, timeout=120)
    try:
        count = cache.incr(key)
    except ValueError:  # evicted between add and incr: count this one as the first
        cache.set(key, 1, timeout=120)
        count = 1
    if count > rate:
        retry_after = max(1, 60 - int(time.time()) % 60)
        raise GatewayError(
            "rate_limited",
            f"This token may make {rate} requests a minute; wait {retry_after} s.",
            headers={"Retry-After": str(retry_after)},
        )


def token_of(request: HttpRequest) -> ApiToken:
    """Return the request's authenticated token."""
    token = getattr(request, "auth", None)
    if not isinstance(token, ApiToken):  # pragma: no cover (auth runs first)
        raise unauthorized("Give a token: Authorization: Bearer jqt_...")
    return token


def require(request: HttpRequest, scope: str, queues: Iterable[str] = ()) -> ApiToken:
    """Return the request's token if it has ``scope`` and is allowed every queue.

    Raises
    ------
    GatewayError
        ``forbidden`` (403), naming the missing scope or the refused queue.
    """
    token = token_of(request)
    if not apitokens.has_scope(token, scope):
        raise GatewayError(
            "forbidden", f"This token lacks the {scope!r} scope.", extra={"scope": scope}
        )
    for queue in queues:
        if not apitokens.queue_allowed(token, queue):
            raise GatewayError(
                "forbidden", f"This token is not allowed queue {queue!r}.", field="queue"
            )
    return token


def origin_of(token: ApiToken) -> str:
    """Return who acts, for ``Job.origin`` and the audit log: ``gateway:<token name>``."""
    return f"gateway:{token.name}"


def actor_of(token: ApiToken) -> Actor:
    """Return who acts, for the audit log: ``gateway`` and the token's name."""
    return Actor("gateway", token.name)
