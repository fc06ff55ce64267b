"""URLs of the example project: the sign-up pages, the admin (jobs live there) and the
HTTP SDK gateway under ``sdk/``."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("console/", include("django_jobqueue.console.urls")),
    path("metrics/", include("django_jobqueue.metrics")),
    path("sdk/", include("django_jobqueue.gateway.urls")),
    path("", include("example_project.newsletter.urls")),
]
