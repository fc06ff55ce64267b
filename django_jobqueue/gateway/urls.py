"""URLs of the SDK gateway: ``path("sdk/", include("django_jobqueue.gateway.urls"))``.

Any other path under the mount answers a JSON ``404 not_found``.
"""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.urls import re_path

from .api import api

__all__ = ["urlpatterns"]


def not_found(request: HttpRequest) -> JsonResponse:
    """Answer a path the gateway does not have."""
    return JsonResponse(
        {"error": "not_found", "detail": "No such route; see openapi.json.", "field": None},
        status=404,
    )


urlpatterns = [
    *api.urls[0],
    re_path(r"", not_found),
]
app_name = api.urls_namespace
