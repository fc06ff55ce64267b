"""The gateway's ASGI entry: its routes served with no thread per request.

In the site's ``asgi.py``, in place of ``get_asgi_application()``::

    from django_jobqueue.gateway.asgi import gateway_application

    application = gateway_application(prefix="/sdk/")

Requests under ``prefix`` (where the site mounts ``django_jobqueue.gateway.urls``) go
to :class:`GatewayHandler`; every other request, and every other scope (lifespan,
websocket), to the site's application (``site``, default Django's own). Django's ASGI
handler runs each request's sync parts (every sync middleware's hooks, a sync view)
in a thread made for that request. The gateway's handler:

- runs none of the site's ``MIDDLEWARE``: the gateway reads no cookie, session or
  user (bearer tokens, JSON in and out), so CSRF, sessions, auth and messages have
  nothing to do; put security headers and TLS in the reverse proxy
  (docs/deployment.md);
- runs each sync route (enqueue, batch, heartbeat, complete, ...) as a whole in a
  thread of the gateway's request pool, and the claim's queries in the claim pool
  (:mod:`.pools`), whose threads keep their connections;
- makes no thread per request, nor any trip to a thread but the pools' (and the
  event loop's default executor, where Django logs 4xx and 5xx answers): Django's
  ``request_started``/``request_finished`` receivers (``close_old_connections``,
  ``reset_queries``: no connection is opened in the event loop, and the pools'
  threads keep theirs) are called in the event loop. A site that connects receivers
  of its own to them gets Django's way back: they run in asgiref's shared thread
  (``Signal.asend``), one request after another.

So a claim waiting on its event (:mod:`.waiting`) holds no thread at all, and
producers' requests never queue behind claims for a thread or a connection.
"""

from __future__ import annotations

import asyncio
import functools
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import django
from asgiref.sync import iscoroutinefunction, sync_to_async
from django.core import signals
from django.core.asgi import get_asgi_application
from django.core.exceptions import RequestAborted
from django.core.handlers.asgi import ASGIHandler, get_script_prefix
from django.core.handlers.exception import convert_exception_to_response
from django.db import close_old_connections, connections, reset_queries
from django.dispatch import Signal
from django.http import HttpRequest, HttpResponseBase
from django.urls import URLPattern, include, path, set_script_prefix

from . import pools

__all__ = ["GatewayHandler", "gateway_application"]

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def _pooled(view: Callable[..., HttpResponseBase]) -> Callable[..., Awaitable[HttpResponseBase]]:
    """An ``async`` view that runs the sync ``view`` whole in the request pool."""

    @functools.wraps(view)
    async def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return await pools.in_pool(pools.request_pool, view, request, *args, **kwargs)

    return run


def _urlconf(prefix: str) -> types.ModuleType:
    """The gateway handler's URLconf: the gateway's routes (sync ones pooled) under
    ``prefix``, with the namespace ``django_jobqueue.gateway.urls`` has."""
    from . import urls

    patterns = [
        URLPattern(p.pattern, _pooled(p.callback), p.default_args, p.name)
        if isinstance(p, URLPattern) and not iscoroutinefunction(p.callback)
        else p
        for p in urls.urlpatterns
    ]
    module = types.ModuleType(f"{__name__}.urlconf")
    module.urlpatterns = [  # type: ignore[attr-defined]
        path(
            prefix.strip("/") + "/" if prefix.strip("/") else "", include((patterns, urls.app_name))
        )
    ]
    return module


#: Receivers of request_started/request_finished that may run in the event loop: they
#: touch only the calling thread's connections, and the event loop's thread has none
#: (the gateway's queries run in its pools' threads).
_LOOP_SAFE = frozenset({close_old_connections, reset_queries})


def _in_loop(signal: Signal, sender: type) -> bool:
    """Whether every receiver of ``signal`` is one of Django's :data:`_LOOP_SAFE` ones,
    and the loop's thread holds no connection for them to check (one opened there by
    other code, say a test's, would be checked by a query: not from the loop)."""
    if connections.all(initialized_only=True):
        return False
    try:
        sync_receivers, async_receivers = signal._live_receivers(sender)
    except (AttributeError, TypeError, ValueError):  # another Django: its own way
        return False
    return not async_receivers and all(receiver in _LOOP_SAFE for receiver in sync_receivers)


async def _announce(signal: Signal, sender: type, **named: Any) -> None:
    if _in_loop(signal, sender):
        signal.send(sender=sender, **named)
    else:
        await signal.asend(sender=sender, **named)


async def _close(response: HttpResponseBase, sender: type) -> None:
    """``response.close()``: its closers, then ``request_finished``."""
    if _in_loop(signals.request_finished, sender):
        response.close()
    else:
        await sync_to_async(response.close)()


class _Processed(Exception):
    """The response was sent: end the task group that listens for a disconnect."""


class GatewayHandler(ASGIHandler):
    """Django's ASGI handler for the gateway's routes alone (see the module docstring).

    Parameters
    ----------
    prefix
        The path the site mounts the gateway's URLs at, with its slashes
        (``"/sdk/"``); a request outside it answers the gateway's JSON 404.
    """

    def __init__(self, prefix: str = "/sdk/") -> None:
        self.urlconf = _urlconf(prefix)
        super().__init__()

    def load_middleware(self, is_async: bool = False) -> None:
        """Load no middleware: the chain is Django's view call and its 404/500 answers."""
        self._view_middleware: list[Any] = []
        self._template_response_middleware: list[Any] = []
        self._exception_middleware: list[Any] = []
        get_response = getattr(self, "_get_response_async" if is_async else "_get_response")
        self._middleware_chain = convert_exception_to_response(get_response)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request, with no per-request thread (no ``ThreadSensitiveContext``).

        Django's ``ASGIHandler.handle``, but for where the signals run: read the
        body, answer, and stop the view (a waiting claim) when the client leaves.
        """
        if scope["type"] != "http":
            raise ValueError(f"The gateway serves HTTP only, not {scope['type']}.")
        marked = pools.served_by_gateway_entry.set(True)
        try:
            await self._serve(scope, receive, send)
        finally:
            pools.served_by_gateway_entry.reset(marked)

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            body_file = await self.read_body(receive)
        except RequestAborted:
            return
        with body_file:
            set_script_prefix(get_script_prefix(scope))
            await _announce(signals.request_started, self.__class__, scope=scope)
            request, error_response = self.create_request(scope, body_file)
            if request is None:
                assert error_response is not None  # create_request gives one of the two
                await self.send_response(error_response, send)
                await _close(error_response, self.__class__)
                return
            response = None
            try:
                try:
                    async with asyncio.TaskGroup() as group:
                        group.create_task(self.listen_for_disconnect(receive))
                        response = await self.run_get_response(request)
                        await self.send_response(response, send)
                        raise _Processed
                except* (_Processed, RequestAborted):
                    pass
            except BaseExceptionGroup as group_error:
                if len(group_error.exceptions) == 1:
                    raise group_error.exceptions[0] from None
                raise
            if response is None:  # the client left before the answer
                await signals.request_finished.asend(sender=self.__class__)
            else:
                await _close(response, self.__class__)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        """Resolve ``request`` against the gateway's URLconf, then answer it."""
        request.urlconf = self.urlconf  # type: ignore[assignment]  # a module, as Django allows
        return await super().get_response_async(request)


def gateway_application(site: ASGIApp | None = None, *, prefix: str = "/sdk/") -> ASGIApp:
    """Return an ASGI application serving ``prefix`` with :class:`GatewayHandler`.

    Parameters
    ----------
    site
        The application for every other request and scope; default
        ``django.core.asgi.get_asgi_application()``.
    prefix
        Where the site's URLconf mounts ``django_jobqueue.gateway.urls``, with its
        slashes: ``"/sdk/"`` for ``path("sdk/", include(...))``.

    Raises
    ------
    ValueError
        ``prefix`` does not start and end with ``/``.
    """
    if not (prefix.startswith("/") and prefix.endswith("/")):
        raise ValueError(f"prefix must start and end with '/', as '/sdk/' does; got {prefix!r}.")
    django.setup(set_prefix=False)
    site_app: ASGIApp = site if site is not None else get_asgi_application()
    gateway = GatewayHandler(prefix)

    async def application(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            root = scope.get("root_path", "")
            route = scope["path"][len(root) :] if scope["path"].startswith(root) else scope["path"]
            if route.startswith(prefix):
                await gateway(scope, receive, send)
                return
        await site_app(scope, receive, send)

    return application
