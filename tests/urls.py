"""URLs for the test suite: the admin, where the app's admin and console live, and the
SDK gateway."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("console/", include("django_jobqueue.console.urls")),
    path("metrics/", include("django_jobqueue.metrics")),
    path("sdk/", include("django_jobqueue.gateway.urls")),
]
