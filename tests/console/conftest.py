"""Fixtures of the console tests: users of every kind, a Pro licence."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from django_jobqueue.store import pauses

ACTION_PERMS = [
    "retry_job",
    "cancel_job",
    "delete_job",
    "pause_queue",
    "manage_schedule",
    "change_job",
]


@pytest.fixture(autouse=True)
def _fresh_pause_cache():
    pauses.clear_cache()
    yield
    pauses.clear_cache()


def _client(user: User | None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


@pytest.fixture
def clients(db):
    """Clients keyed by role: anonymous, nonstaff, staff (no permission), permitted, superuser."""
    plain = User.objects.create_user("plain")
    staff = User.objects.create_user("staff", is_staff=True)
    permitted = User.objects.create_user("permitted", is_staff=True)
    permitted.user_permissions.set(
        Permission.objects.filter(
            content_type__app_label="django_jobqueue", codename__in=ACTION_PERMS
        )
    )
    root = User.objects.create_superuser("root", password=None)
    return {
        "anonymous": _client(None),
        "nonstaff": _client(plain),
        "staff": _client(staff),
        "permitted": _client(permitted),
        "superuser": _client(root),
    }
