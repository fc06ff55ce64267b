"""URLs of the newsletter app."""

from __future__ import annotations

from django.urls import path

from . import views

app_name = "newsletter"

urlpatterns = [
    path("", views.signup, name="signup"),
    path("thanks/", views.thanks, name="thanks"),
]
