"""Request bodies: at most ``JOBQUEUE["GATEWAY"]["MAX_BODY_BYTES"]``, and JSON.

A body over the limit answers 413 (judged from ``Content-Length`` before it is read,
and again on its bytes); a ``Content-Type`` other than ``application/json`` (or
``*/*+json``), or bytes that are not JSON (nesting too deep for the parser
included), answer 415.
"""

from __future__ import annotations

import json
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest
from ninja.parser import Parser

from ..core.conf import get_config
from .errors import GatewayError

__all__ = ["JsonBodyParser", "declared_length"]


def _too_large(limit: int) -> GatewayError:
    return GatewayError(
        "body_too_large",
        f"The request body is over {limit} bytes; split the batch.",
        field="body",
    )


def declared_length(request: HttpRequest) -> int:
    """Return the body size ``request`` declares in ``Content-Length``, bytes (0: none).

    Raises
    ------
    GatewayError
        ``bad_request`` (400) if the header is not a whole number >= 0: Django 5.2
        would raise ``ValueError`` on reading such a body, a 500.
    """
    text = request.META.get("CONTENT_LENGTH") or "0"
    try:
        declared = int(text)
    except ValueError:
        declared = -1
    if declared < 0:
        raise GatewayError(
            "bad_request",
            f"Content-Length must be a whole number of bytes: got {text!r}.",
            field="Content-Length",
        )
    return declared


def _not_json(detail: str) -> GatewayError:
    return GatewayError("not_json", detail, field="body")


class JsonBodyParser(Parser):
    """django-ninja's parser, with the gateway's size and type checks."""

    def parse_body(self, request: HttpRequest) -> Any:
        """Return the JSON body of ``request``.

        Raises
        ------
        GatewayError
            ``body_too_large`` (413) or ``not_json`` (415).
        """
        limit = get_config().GATEWAY.MAX_BODY_BYTES
        if declared_length(request) > limit:
            raise _too_large(limit)
        content_type = request.content_type or ""
        if content_type != "application/json" and not (
            content_type.startswith("application/") and content_type.endswith("+json")
        ):
            raise _not_json(
                f"Send JSON with Content-Type: application/json (got {content_type!r})."
            )
        try:
            raw = request.body
        except RequestDataTooBig as exc:
            raise _too_large(limit) from exc
        if len(raw) > limit:
            raise _too_large(limit)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError) as exc:
            raise _not_json(f"The request body is not JSON: {type(exc).__name__}.") from exc
