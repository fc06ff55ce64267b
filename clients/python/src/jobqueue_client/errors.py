"""Typed errors of the gateway client: one class per error code of the gateway.

Every error answer of the gateway is ``{"error": code, "detail": text, "field": name}``
(plus ``index``, ``jid``, ``reason``, ``scope``); :func:`error_from_response` turns it
into the class registered for its code, so callers catch what they mean::

    try:
        client.enqueue("emails.send", {"to": "ada@example.com"}, unique_mode="until_executed")
    except ProRequired:
        ...
    except InvalidRequest as exc:
        print(exc.field, exc.detail)

A network failure (no answer at all) is :class:`GatewayUnreachable`, status ``None``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BadRequest",
    "BodyTooLarge",
    "DatabaseUnavailable",
    "DuplicateJob",
    "Forbidden",
    "GatewayError",
    "GatewayUnreachable",
    "InvalidRequest",
    "LeaseLost",
    "LockTimeout",
    "MethodNotAllowed",
    "NotFound",
    "NotJson",
    "ProRequired",
    "RateLimited",
    "ServiceUnavailable",
    "Unauthorized",
    "error_from_response",
]


class GatewayError(Exception):
    """An error answer of the gateway (or no answer: :class:`GatewayUnreachable`).

    Attributes
    ----------
    status:
        The HTTP status (None when the gateway did not answer).
    code:
        The body's ``error`` code, such as ``"invalid_request"``.
    detail:
        The body's sentence for people.
    field:
        The request field at fault (``"priority"``, ``"jobs[3].queue"``), or None.
    index:
        The refused job's position in a batch, or None.
    jid:
        The holder of a duplicate id (409 ``duplicate_job``), or None.
    reason:
        The package's own code of an ``invalid_request`` (``"invalid_option"``...).
    scope:
        The scope a 403 lacked, or None.
    retry_after:
        Seconds from the ``Retry-After`` header (429, 503), or None.
    body:
        The whole decoded body (a dict; empty when it was not JSON).
    """

    code = "gateway_error"

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str | None = None,
        field: str | None = None,
        index: int | None = None,
        jid: str | None = None,
        reason: str | None = None,
        scope: str | None = None,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        if code is not None:
            self.code = code
        self.detail = detail
        self.field = field
        self.index = index
        self.jid = jid
        self.reason = reason
        self.scope = scope
        self.retry_after = retry_after
        self.body = body or {}

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.status} {self.code}: {self.detail}{where}"


class GatewayUnreachable(GatewayError):
    """No answer: the connection failed or timed out (``status`` is None)."""

    code = "unreachable"

    def __str__(self) -> str:
        # No status to show: the detail names the URL and the transport's error.
        return f"unreachable: {self.detail}"


class BadRequest(GatewayError):
    """400: a path or query parameter is malformed."""

    code = "bad_request"


class InvalidRequest(GatewayError):
    """422: a body field is invalid; ``field`` names it, ``index`` the batch's job."""

    code = "invalid_request"


class Unauthorized(GatewayError):
    """401: no token, or an unknown, revoked or expired one."""

    code = "unauthorized"


class ProRequired(GatewayError):
    """402: a Pro unique mode or route, without a valid licence on the server."""

    code = "pro_required"


class Forbidden(GatewayError):
    """403: the token lacks the scope (``scope``) or is not allowed the queue."""

    code = "forbidden"


class NotFound(GatewayError):
    """404: no such job, a free id, or no such route."""

    code = "not_found"


class MethodNotAllowed(GatewayError):
    """405: the route exists, not with this method."""

    code = "method_not_allowed"


class DuplicateJob(GatewayError):
    """409: the id is held; ``jid`` is the holder's."""

    code = "duplicate_job"


class LeaseLost(GatewayError):
    """409: a worker reported on a job it no longer holds; drop the outcome."""

    code = "lease_lost"


class BodyTooLarge(GatewayError):
    """413: the body is over the gateway's ``MAX_BODY_BYTES``."""

    code = "body_too_large"


class NotJson(GatewayError):
    """415: the body was not JSON."""

    code = "not_json"


class RateLimited(GatewayError):
    """429: the token is over its request rate; wait ``retry_after`` seconds."""

    code = "rate_limited"


class ServiceUnavailable(GatewayError):
    """503: try again after ``retry_after`` seconds."""

    code = "service_unavailable"


class LockTimeout(ServiceUnavailable):
    """503: a creation lock timed out."""

    code = "lock_timeout"


class DatabaseUnavailable(ServiceUnavailable):
    """503: the gateway's database did not answer."""

    code = "database_unavailable"


_BY_CODE: dict[str, type[GatewayError]] = {
    cls.code: cls
    for cls in (
        BadRequest,
        InvalidRequest,
        Unauthorized,
        ProRequired,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        DuplicateJob,
        LeaseLost,
        BodyTooLarge,
        NotJson,
        RateLimited,
        LockTimeout,
        DatabaseUnavailable,
    )
}
#: The class of an answer whose code is unknown to this client, by status.
_BY_STATUS: dict[int, type[GatewayError]] = {
    400: BadRequest,
    401: Unauthorized,
    402: ProRequired,
    403: Forbidden,
    404: NotFound,
    405: MethodNotAllowed,
    413: BodyTooLarge,
    415: NotJson,
    422: InvalidRequest,
    429: RateLimited,
    503: ServiceUnavailable,
}


def _retry_after(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def error_from_response(status: int, body: Any, headers: Any) -> GatewayError:
    """Return the typed error of a gateway answer with status >= 400.

    Parameters
    ----------
    status:
        The HTTP status.
    body:
        The decoded JSON body (anything; a non-dict counts as empty).
    headers:
        The response headers (a mapping with ``.get``), read for ``Retry-After``.
    """
    data: dict[str, Any] = body if isinstance(body, dict) else {}
    code = data.get("error") if isinstance(data.get("error"), str) else None
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status, GatewayError)
    detail = data.get("detail")
    return cls(
        detail if isinstance(detail, str) else f"HTTP {status}",
        status=status,
        code=code or cls.code,
        field=data.get("field"),
        index=data.get("index"),
        jid=data.get("jid"),
        reason=data.get("reason"),
        scope=data.get("scope"),
        retry_after=_retry_after(headers.get("Retry-After")),
        body=data,
    )
