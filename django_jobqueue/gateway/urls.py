"""URLs of the SDK gateway: ``path("sdk/", include("django_jobqueue.gateway.urls"))``.

Any other path under the mount answers a JSON ``404 not_found``; a route asked with a
method it does not have answers a JSON ``405 method_not_allowed`` with ``Allow``
(django-ninja's own answer is a text/html "Method not allowed").
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponseBase, JsonResponse
from django.urls import URLPattern, re_path
from django.views.decorators.csrf import csrf_exempt

from .api import api
from .errors import GatewayError

__all__ = ["urlpatterns"]


@csrf_exempt
def not_found(request: HttpRequest) -> JsonResponse:
    """Answer a path the gateway does not have, whatever the method.

    CSRF-exempt: the gateway authenticates by bearer token, never by cookie, so
    a POST to an unknown path gets this JSON 404, not Django's HTML 403 page.
    """
    return JsonResponse(
        {"error": "not_found", "detail": "No such route; see openapi.json.", "field": None},
        status=404,
    )


def json_not_allowed(view: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap ``view`` so that its ``405`` answer is the gateway's JSON error body.

    Parameters
    ----------
    view:
        A view of the gateway's NinjaAPI.

    Returns
    -------
    callable
        The view, whose 405 answers ``{"error": "method_not_allowed", ...}`` with the
        route's methods in ``Allow`` (sorted) and in the detail.
    """

    def answer(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if response.status_code != 405 or response.get("Content-Type") == "application/json":
            return response
        methods = sorted({name.strip() for name in response.get("Allow", "").split(",")} - {""})
        allowed = ", ".join(methods)
        error = GatewayError(
            "method_not_allowed",
            f"{request.method} is not a method of {request.path}; use {allowed or 'another'}.",
        )
        json_answer = JsonResponse(error.body(), status=error.status)
        json_answer["Allow"] = allowed
        return json_answer

    if iscoroutinefunction(view):  # the claim: its wait holds no thread under ASGI

        @functools.wraps(view)
        async def wrapped_async(
            request: HttpRequest, *args: Any, **kwargs: Any
        ) -> HttpResponseBase:
            return answer(request, await view(request, *args, **kwargs))

        return wrapped_async

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        return answer(request, view(request, *args, **kwargs))

    return wrapped


def _with_json_405(pattern: Any) -> Any:
    if not isinstance(pattern, URLPattern):
        return pattern
    return URLPattern(
        pattern.pattern, json_not_allowed(pattern.callback), pattern.default_args, pattern.name
    )


def _gateway_pattern(pattern: Any) -> Any:
    if isinstance(pattern, URLPattern) and pattern.name == "api-root":
        # django-ninja's root page is an HTML 404 without docs; the name stays, as
        # the OpenAPI document reverses it for the mount's prefix.
        return URLPattern(pattern.pattern, not_found, pattern.default_args, pattern.name)
    return _with_json_405(pattern)


urlpatterns = [
    *(_gateway_pattern(pattern) for pattern in api.urls[0]),
    re_path(r"", not_found),
]
app_name = api.urls_namespace
