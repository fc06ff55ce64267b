"""The gateway's producer and worker-protocol calls over httpx: :class:`Client` (sync)
and :class:`AsyncClient` (asyncio), with the same methods and answers.

::

    from jobqueue_client import Client

    with Client("https://app.example.com/sdk", token="jqt_...") as jq:
        jid = jq.enqueue("emails.send", {"to": "ada@example.com"}, queue="emails").jid
        print(jq.get_job(jid).state)

Every method raises a :class:`~jobqueue_client.errors.GatewayError` subclass
for an error answer (``InvalidRequest``, ``ProRequired``, ``Forbidden``...), and
:class:`~jobqueue_client.errors.GatewayUnreachable` when no answer came.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, Literal, TypeVar, Unpack
from urllib.parse import urlsplit

import httpx

from . import calls
from .calls import Call, EnqueueOptions
from .errors import GatewayError, GatewayUnreachable, NotFound, error_from_response
from .types import BulkResult, CancelResult, ClaimedJob, Enqueued, IdJob, Job, Page, Registration
from .version import DISTRIBUTION, VERSION

__all__ = ["AsyncClient", "Client"]

T = TypeVar("T")

#: Seconds to wait for an answer beyond a claim's own ``wait_ms``.
DEFAULT_TIMEOUT_S = 30.0


def _headers(token: str) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json",
        "User-Agent": f"{DISTRIBUTION}/{VERSION}",
    }


def _request_kwargs(call: Call[Any], token: str, timeout: float | None) -> dict[str, Any]:
    headers = _headers(token)
    kwargs: dict[str, Any] = {"params": call.params, "headers": headers}
    if call.json is not None or call.method == "POST":
        kwargs["content"] = json.dumps(call.json if call.json is not None else {})
        headers["Content-Type"] = "application/json"
    if timeout is not None:
        kwargs["timeout"] = timeout
    return kwargs


def _answer(call: Call[T], response: httpx.Response) -> T:
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.status_code >= 400:
        error = error_from_response(response.status_code, body, response.headers)
        if call.none_on_404 and isinstance(error, NotFound):
            return None  # type: ignore[return-value]
        raise error
    if not isinstance(body, dict):
        raise GatewayError(
            f"expected a JSON object, got {response.text[:200]!r}",
            status=response.status_code,
            code="bad_answer",
        )
    return call.parse(body)


def _claim_timeout(timeout: float, wait_ms: int) -> float:
    return timeout + wait_ms / 1000


class _Base:
    def __init__(self, url: str, token: str, timeout: float) -> None:
        parsed = urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(
                f"The gateway URL must be http:// or https:// with a host, got {url!r}: "
                "write it as http://host:port/sdk."
            )
        # The site's root alone is the gateway at its documented mount, /sdk (as the
        # other languages' clients and jobqueue-worker read it); any path is kept.
        self.url = url.rstrip("/") if parsed.path.strip("/") else f"{url.rstrip('/')}/sdk"
        self.token = token
        self.timeout = timeout


class Client(_Base):
    """A synchronous client of one gateway; thread-safe (one httpx connection pool).

    Parameters
    ----------
    url:
        The gateway's base URL, where it is mounted: ``"http://127.0.0.1:8000/sdk"``;
        the site's root alone (``"http://127.0.0.1:8000"``) means its ``/sdk``.
    token:
        An API token (``jqt_...``) with the scopes the calls need.
    timeout:
        Seconds to wait for an answer (a claim adds its ``wait_ms``).
    http:
        An ``httpx.Client`` to use (its base URL and headers are left alone; this
        client passes full URLs). None: one of its own, closed by :meth:`close`.

    Raises
    ------
    ValueError
        If ``url`` is not ``http://`` or ``https://`` with a host (it could never
        answer: a worker would retry it forever).
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http: httpx.Client | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._own = http is None
        self._http = http or httpx.Client(timeout=timeout, limits=httpx.Limits(max_connections=100))

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool (only if this client made it)."""
        if self._own:
            self._http.close()

    def send(self, call: Call[T], *, timeout: float | None = None) -> T:
        """Send one :class:`~jobqueue_client.calls.Call` and read its answer.

        Raises
        ------
        GatewayError
            The typed error of an error answer; ``GatewayUnreachable`` for none.
        """
        try:
            response = self._http.request(
                call.method,
                self.url + call.path,
                **_request_kwargs(call, self.token, timeout),
            )
        except httpx.TransportError as exc:
            raise GatewayUnreachable(
                f"{self.url + call.path}: {type(exc).__name__}: {exc}"
            ) from exc
        return _answer(call, response)

    # Producer calls ------------------------------------------------------------

    def enqueue(
        self, job_type: str, payload: Any = None, **options: Unpack[EnqueueOptions]
    ) -> Enqueued:
        """Enqueue one job (``POST /jobs``); ``options`` are :class:`EnqueueOptions`.

        Returns ``Enqueued(status="enqueued"|"deduplicated", jid)``. Raises
        ``InvalidRequest`` (``field`` names the option), ``ProRequired``,
        ``DuplicateJob`` (a held ``id``; ``jid`` is the holder), ``Forbidden``.
        """
        return self.send(calls.enqueue(job_type, payload, options))

    def enqueue_batch(self, jobs: Sequence[Mapping[str, Any]]) -> builtins.list[Enqueued]:
        """Enqueue up to the gateway's ``MAX_BATCH`` jobs, all or nothing.

        ``jobs``: mappings with ``job_type``, ``payload`` and any :class:`EnqueueOptions`.
        One refused job refuses the batch: the error's ``index`` names it.
        """
        return self.send(calls.enqueue_batch(jobs))

    def get_job(self, jid: str) -> Job:
        """Return a job by jid. Raises ``NotFound``."""
        return self.send(calls.get_job(jid))

    def cancel(self, jid: str) -> CancelResult:
        """Cancel a waiting job, or ask a running one to stop. Raises ``NotFound``."""
        return self.send(calls.cancel(jid))

    def retry(self, jid: str) -> bool:
        """Make a dead letter (or a scheduled job) due now (admin scope)."""
        return self.send(calls.retry(jid))

    def bulk(self, action: Literal["retry", "cancel", "delete"], job_filter: str) -> BulkResult:
        """Retry, cancel or delete every job ``job_filter`` selects (admin scope, Pro).

        ``job_filter`` is the filter language of the server's docs/console.md "Search
        syntax" (``"queue:mail state:failed payload.customer_id:42"``). Raises
        ``InvalidRequest`` (422) naming a bad term, ``Forbidden`` (403) and
        ``ProRequired`` (402) as the gateway answers.
        """
        return self.send(calls.bulk(action, job_filter))

    def add(
        self,
        queue: str,
        job_id: str,
        value: Any = None,
        *,
        job_type: str | None = None,
        at: datetime | str | None = None,
        delay: str | float | None = None,
    ) -> bool:
        """The id verb ``add``: enqueue under ``job_id`` unless a job holds it (then False)."""
        return self.send(calls.id_verb("add", queue, job_id, value, job_type, at, delay))

    def set(
        self,
        queue: str,
        job_id: str,
        value: Any = None,
        *,
        job_type: str | None = None,
        at: datetime | str | None = None,
        delay: str | float | None = None,
    ) -> bool:
        """The id verb ``set``: add, or replace the waiting job's value and time; True."""
        return self.send(calls.id_verb("set", queue, job_id, value, job_type, at, delay))

    def update(
        self,
        queue: str,
        job_id: str,
        value: Any = None,
        *,
        job_type: str | None = None,
        at: datetime | str | None = None,
        delay: str | float | None = None,
    ) -> bool:
        """The id verb ``update``: change a scheduled or waiting job; False if none."""
        return self.send(calls.id_verb("update", queue, job_id, value, job_type, at, delay))

    def cancel_id(self, queue: str, job_id: str) -> bool:
        """The id verb ``cancel``: remove the job holding the id or ask it to stop."""
        return self.send(calls.id_cancel(queue, job_id))

    def get(self, queue: str, job_id: str) -> IdJob | None:
        """The id verb ``get``: the job holding the id, or None when it is free."""
        return self.send(calls.id_get(queue, job_id))

    def list(
        self,
        queue: str,
        *,
        prefix: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page:
        """The id verb ``list``: a page of the queue's jobs by id prefix and state."""
        return self.send(calls.id_list(queue, prefix, state, limit, cursor))

    # Worker protocol -------------------------------------------------------------

    def register(self, **body: Any) -> Registration:
        """Register a worker (``RegisterIn``: name, host, pid, languages, queues...)."""
        return self.send(calls.register(body))

    def stop_worker(self, name: str) -> bool:
        """Mark the registered worker ``name`` stopped (a clean exit); False if it
        already was. Raises ``NotFound`` for a name no gateway worker registered."""
        return self.send(calls.stop_worker(name))

    def claim(
        self,
        queues: Sequence[str],
        *,
        job_types: Sequence[str] = (),
        limit: int = 1,
        wait_ms: int = 0,
        worker: str | None = None,
        lease_ms: int | None = None,
    ) -> builtins.list[ClaimedJob]:
        """Claim up to ``limit`` due jobs, long-polling up to ``wait_ms`` for one."""
        body: dict[str, Any] = {
            "queues": list(queues),
            "job_types": list(job_types),
            "limit": limit,
            "wait_ms": wait_ms,
        }
        if worker is not None:
            body["worker"] = worker
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        return self.send(calls.claim(body), timeout=_claim_timeout(self.timeout, wait_ms))

    def heartbeat(
        self,
        jid: str,
        lease_token: str,
        *,
        lease_ms: int | None = None,
        progress: Mapping[str, Any] | None = None,
    ) -> bool:
        """Extend a claimed job's lease; return whether it was asked to stop.

        ``progress``: ``{"done": int, "total": int, "message": str | None}``, stored
        with the lease (the server's docs/console.md "Progress"). Raises
        ``LeaseLost`` when the job is no longer held under ``lease_token``.
        """
        return self.send(calls.heartbeat(jid, lease_token, lease_ms, progress))

    def complete(self, jid: str, lease_token: str, result: Any = None) -> str:
        """Report success with a JSON result; return the stored status. ``LeaseLost``."""
        return self.send(calls.complete(jid, lease_token, result))

    def fail(
        self,
        jid: str,
        lease_token: str,
        error: str,
        *,
        exception_class: str = "",
        retry: bool = True,
        cancelled: bool = False,
    ) -> str:
        """Report a failed attempt; ``retry`` False dead-letters it at once; return the
        stored status (``retry``, ``max_retry``, ``error``, ``cancelled``). ``LeaseLost``."""
        return self.send(calls.fail(jid, lease_token, error, exception_class, retry, cancelled))


class AsyncClient(_Base):
    """The asyncio twin of :class:`Client`: the same methods, awaited.

    Parameters are :class:`Client`'s, with ``http`` an ``httpx.AsyncClient``.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        super().__init__(url, token, timeout)
        self._own = http is None
        self._http = http or httpx.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool (only if this client made it)."""
        if self._own:
            await self._http.aclose()

    async def send(self, call: Call[T], *, timeout: float | None = None) -> T:
        """Send one call and read its answer; errors as :meth:`Client.send`."""
        try:
            response = await self._http.request(
                call.method,
                self.url + call.path,
                **_request_kwargs(call, self.token, timeout),
            )
        except httpx.TransportError as exc:
            raise GatewayUnreachable(
                f"{self.url + call.path}: {type(exc).__name__}: {exc}"
            ) from exc
        return _answer(call, response)

    async def enqueue(
        self, job_type: str, payload: Any = None, **options: Unpack[EnqueueOptions]
    ) -> Enqueued:
        """See :meth:`Client.enqueue`."""
        return await self.send(calls.enqueue(job_type, payload, options))

    async def enqueue_batch(self, jobs: Sequence[Mapping[str, Any]]) -> builtins.list[Enqueued]:
        """See :meth:`Client.enqueue_batch`."""
        return await self.send(calls.enqueue_batch(jobs))

    async def get_job(self, jid: str) -> Job:
        """See :meth:`Client.get_job`."""
        return await self.send(calls.get_job(jid))

    async def cancel(self, jid: str) -> CancelResult:
        """See :meth:`Client.cancel`."""
        return await self.send(calls.cancel(jid))

    async def retry(self, jid: str) -> bool:
        """See :meth:`Client.retry`."""
        return await self.send(calls.retry(jid))

    async def bulk(
        self, action: Literal["retry", "cancel", "delete"], job_filter: str
    ) -> BulkResult:
        """See :meth:`Client.bulk`."""
        return await self.send(calls.bulk(action, job_filter))

    async def _id_verb(
        self,
        verb: Literal["add", "set", "update"],
        queue: str,
        job_id: str,
        value: Any,
        job_type: str | None,
        at: datetime | str | None,
        delay: str | float | None,
    ) -> bool:
        return await self.send(calls.id_verb(verb, queue, job_id, value, job_type, at, delay))

    async def add(
        self,
        queue: str,
        job_id: str,
        value: Any = None,
        *,
        job_type: str | None = None,
        at: datetime | str | None = None,
        delay: str | float | None = None,
    ) -> bool:
        """See :meth:`Client.add`."""
        return await self._id_verb("add", queue, job_id, value, job_type, at, delay)

    async def set(
        self,
        queue: str,
        job_id: str,
        value: Any = None,
        *,
        job_type: str | None = None,
        at: datetime | str | None = None,
        delay: str | float | None = None,
    ) -> bool:
        """See :meth:`Client.set`."""
        return await self._id_verb("set", queue, job_id, value, job_type, at, delay)

    async def update(
        self,
        queue: str,
        job_id: str,
        value: Any = None,
        *,
        job_type: str | None = None,
        at: datetime | str | None = None,
        delay: str | float | None = None,
    ) -> bool:
        """See :meth:`Client.update`."""
        return await self._id_verb("update", queue, job_id, value, job_type, at, delay)

    async def cancel_id(self, queue: str, job_id: str) -> bool:
        """See :meth:`Client.cancel_id`."""
        return await self.send(calls.id_cancel(queue, job_id))

    async def get(self, queue: str, job_id: str) -> IdJob | None:
        """See :meth:`Client.get`."""
        return await self.send(calls.id_get(queue, job_id))

    async def list(
        self,
        queue: str,
        *,
        prefix: str | None = None,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page:
        """See :meth:`Client.list`."""
        return await self.send(calls.id_list(queue, prefix, state, limit, cursor))

    async def register(self, **body: Any) -> Registration:
        """See :meth:`Client.register`."""
        return await self.send(calls.register(body))

    async def stop_worker(self, name: str) -> bool:
        """See :meth:`Client.stop_worker`."""
        return await self.send(calls.stop_worker(name))

    async def claim(
        self,
        queues: Sequence[str],
        *,
        job_types: Sequence[str] = (),
        limit: int = 1,
        wait_ms: int = 0,
        worker: str | None = None,
        lease_ms: int | None = None,
    ) -> builtins.list[ClaimedJob]:
        """See :meth:`Client.claim`."""
        body: dict[str, Any] = {
            "queues": list(queues),
            "job_types": list(job_types),
            "limit": limit,
            "wait_ms": wait_ms,
        }
        if worker is not None:
            body["worker"] = worker
        if lease_ms is not None:
            body["lease_ms"] = lease_ms
        return await self.send(calls.claim(body), timeout=_claim_timeout(self.timeout, wait_ms))

    async def heartbeat(
        self,
        jid: str,
        lease_token: str,
        *,
        lease_ms: int | None = None,
        progress: Mapping[str, Any] | None = None,
    ) -> bool:
        """See :meth:`Client.heartbeat`."""
        return await self.send(calls.heartbeat(jid, lease_token, lease_ms, progress))

    async def complete(self, jid: str, lease_token: str, result: Any = None) -> str:
        """See :meth:`Client.complete`."""
        return await self.send(calls.complete(jid, lease_token, result))

    async def fail(
        self,
        jid: str,
        lease_token: str,
        error: str,
        *,
        exception_class: str = "",
        retry: bool = True,
        cancelled: bool = False,
    ) -> str:
        """See :meth:`Client.fail`."""
        return await self.send(
            calls.fail(jid, lease_token, error, exception_class, retry, cancelled)
        )
