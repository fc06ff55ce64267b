"""Helpers of the admin tests (tests/test_admin*.py): a superuser's client, a job's page.

A test module takes the fixture ``admin_client`` in by assigning it to a module
name of its own (``admin_client = admin_helpers.admin_client``), where it stands in
for pytest-django's fixture of that name.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_jobqueue.models import Job

CHANGELIST = "admin:django_jobqueue_job_changelist"
XSS = "<script>alert('pwned')</script>"


@pytest.fixture
def admin_client(db: None) -> Client:
    # No password: force_login needs none, and hashing one takes a second.
    user = User.objects.create_superuser("boss", "boss@example.com", None)
    client = Client()
    client.force_login(user)
    return client


def detail(client: Client, job: Job) -> str:
    response = client.get(reverse("admin:django_jobqueue_job_change", args=[job.pk]))
    assert response.status_code == 200
    return response.content.decode()
