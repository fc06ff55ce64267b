"""URLs of the example project: the sign-up pages and the admin (jobs live there)."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("example_project.newsletter.urls")),
]
