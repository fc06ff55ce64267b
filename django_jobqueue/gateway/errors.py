"""Errors of the gateway: one table from error code to HTTP status, one JSON body.

Every error answer is ``{"error": code, "detail": text, "field": name or null}``,
plus ``index`` for a job of a batch and ``jid`` for the holder of a duplicate id.
The package's typed errors (:mod:`django_jobqueue.core.exceptions`) map by their ``code``
through :data:`STATUS_BY_CODE`; every ``InvalidRequest`` answers ``invalid_request``
(its own code is in ``reason``). A database that does not answer (``OperationalError``,
``InterfaceError``) is a logged 503 with ``Retry-After``. Nothing else is caught: every
other input is validated before it can raise.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.db import InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse

from ..core.exceptions import DuplicateJob, InvalidRequest, JobQueueError

if TYPE_CHECKING:
    from ninja import NinjaAPI

__all__ = ["STATUS_BY_CODE", "GatewayError", "install_handlers", "status_of"]

logger = logging.getLogger(__name__)

#: HTTP status of each error code, the gateway's own and the package's.
STATUS_BY_CODE: Mapping[str, int] = {
    "bad_request": 400,
    "invalid_request": 422,
    "invalid_option": 422,
    "invalid_payload": 422,
    "invalid_job_id": 422,
    "unknown_job_type": 422,
    "unauthorized": 401,
    "pro_required": 402,
    "forbidden": 403,
    "not_found": 404,
    "method_not_allowed": 405,
    "duplicate_job": 409,
    "lease_lost": 409,
    "body_too_large": 413,
    "not_json": 415,
    "rate_limited": 429,
    "lock_timeout": 503,
    "database_unavailable": 503,
    "wrong_database": 503,
    "improperly_configured": 503,
}
#: Seconds a client should wait before trying again after a 503.
RETRY_AFTER_S = 1


def status_of(code: str) -> int:
    """Return the HTTP status of error ``code`` (503 for a code not in the table)."""
    return STATUS_BY_CODE.get(code, 503)


class GatewayError(Exception):
    """An error answer of the gateway: raise it from a route or a check.

    Parameters
    ----------
    code:
        A key of :data:`STATUS_BY_CODE`.
    detail:
        A sentence for people.
    field:
        The request field at fault, such as ``"priority"`` or ``"jobs[3].queue"``.
    headers:
        Extra response headers (``Retry-After``, ``WWW-Authenticate``).
    extra:
        Extra members of the body (``index``, ``jid``).
    """

    def __init__(
        self,
        code: str,
        detail: str,
        *,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.code = code
        self.detail = detail
        self.field = field
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})

    @property
    def status(self) -> int:
        """The HTTP status of this error."""
        return status_of(self.code)

    def body(self) -> dict[str, Any]:
        """Return the JSON body of this error."""
        return {"error": self.code, "detail": self.detail, "field": self.field, **self.extra}


def from_jobqueue_error(
    exc: JobQueueError, *, field: str | None = None, index: int | None = None
) -> GatewayError:
    """Return the gateway answer of one of the package's typed errors."""
    extra: dict[str, Any] = {}
    if index is not None:
        extra["index"] = index
    code = exc.code
    if isinstance(exc, InvalidRequest):
        extra["reason"] = exc.code
        code = "invalid_request"
    if isinstance(exc, DuplicateJob) and exc.holder_jid:
        extra["jid"] = exc.holder_jid
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status_of(code) == 503 else None
    return GatewayError(code, str(exc), field=field, headers=headers, extra=extra)


def bad_parameter(exc: JobQueueError, field: str) -> GatewayError:
    """Return the gateway answer of a malformed path or query parameter ``field``:
    ``400 bad_request`` naming it, as ninja's own parameter checks answer (a body
    field's is ``422 invalid_request``, :func:`from_jobqueue_error`)."""
    return GatewayError("bad_request", str(exc), field=field, extra={"reason": exc.code})


def _field_of_loc(loc: Any) -> tuple[str | None, bool, int | None]:
    """Return (the field a ninja error location names, whether it is in the body, the
    index of a batch's job)."""
    parts = list(loc) if isinstance(loc, list | tuple) else [loc]
    source = parts[0] if parts else ""
    rest = parts[1:]
    if source == "body" and rest:
        rest = rest[1:]  # the route's body argument, such as "spec"
    index = rest[1] if len(rest) > 1 and rest[0] == "jobs" and isinstance(rest[1], int) else None
    name = ""
    for part in rest:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or None, source == "body", index


def respond(api: NinjaAPI, request: HttpRequest, error: GatewayError) -> HttpResponse:
    """Return the HTTP response of ``error``."""
    response = api.create_response(request, error.body(), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def install_handlers(api: NinjaAPI) -> None:
    """Map every error the gateway answers to its JSON body, on ``api``."""
    from ninja.errors import AuthenticationError, HttpError, ValidationError

    def gateway_error(request: HttpRequest, exc: GatewayError) -> HttpResponse:
        return respond(api, request, exc)

    def jobqueue_error(request: HttpRequest, exc: JobQueueError) -> HttpResponse:
        return respond(api, request, from_jobqueue_error(exc))

    def validation_error(request: HttpRequest, exc: ValidationError) -> HttpResponse:
        first = exc.errors[0] if exc.errors else {}
        if not request.body and any(
            tuple(error.get("loc", ()))[:1] == ("body",) for error in exc.errors
        ):
            # django-ninja skips the parser for an empty body; a route that needs one
            # answers as for any other body that is not JSON.
            return respond(
                api,
                request,
                GatewayError("not_json", "The request body is empty; send JSON.", field="body"),
            )
        field, in_body, index = _field_of_loc(first.get("loc", ()))
        extra: dict[str, Any] = {"reason": "invalid_request"}
        if index is not None:
            extra["index"] = index
        error = GatewayError(
            "invalid_request" if in_body else "bad_request",
            f"{field or 'the request'}: {first.get('msg', 'invalid')}",
            field=field,
            extra=extra,
        )
        return respond(api, request, error)

    def http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
        cause = exc.__cause__
        if isinstance(cause, GatewayError):  # raised by the body parser
            return respond(api, request, cause)
        if isinstance(exc, AuthenticationError):
            detail = "Give a token: Authorization: Bearer jqt_..."
            return respond(api, request, unauthorized(detail))
        code = {400: "bad_request", 404: "not_found", 405: "method_not_allowed"}
        return respond(
            api, request, GatewayError(code.get(exc.status_code, "bad_request"), str(exc))
        )

    def not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
        return respond(api, request, GatewayError("not_found", "No such object."))

    def database_error(request: HttpRequest, exc: Any) -> HttpResponse:
        logger.warning(
            "gateway: database unavailable path=%s error=%s", request.path, type(exc).__name__
        )
        return respond(
            api,
            request,
            GatewayError(
                "database_unavailable",
                "The database did not answer; try again.",
                headers={"Retry-After": str(RETRY_AFTER_S)},
            ),
        )

    api.add_exception_handler(GatewayError, gateway_error)  # type: ignore[arg-type]
    api.add_exception_handler(JobQueueError, jobqueue_error)  # type: ignore[arg-type]
    api.add_exception_handler(ValidationError, validation_error)  # type: ignore[arg-type]
    api.add_exception_handler(HttpError, http_error)  # type: ignore[arg-type]
    api.add_exception_handler(Http404, not_found)  # type: ignore[arg-type]
    api.add_exception_handler(OperationalError, database_error)
    api.add_exception_handler(InterfaceError, database_error)


def unauthorized(detail: str) -> GatewayError:
    """Return the 401 answer, with its ``WWW-Authenticate`` challenge."""
    return GatewayError("unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})
