"""``POST /sdk/queues/{queue}/pause|resume``: the admin scope only."""

from __future__ import annotations

import pytest

from django_jobqueue.models import QueuePause
from django_jobqueue.store import pauses

pytestmark = pytest.mark.django_db


def test_pause_and_resume__with_an_admin_token(admin_api):
    response = admin_api.post("/sdk/queues/mail/pause")
    assert (response.status_code, response.json()) == (200, {"paused": True, "changed": True})
    assert admin_api.post("/sdk/queues/mail/pause").json() == {"paused": True, "changed": False}
    assert QueuePause.objects.get().paused_by.startswith("gateway:")
    assert admin_api.post("/sdk/queues/mail/resume").json() == {"paused": False, "changed": True}
    assert pauses.paused_queues("default", max_age_s=0) == frozenset()


def test_pause__refused_without_the_admin_scope(api):
    response = api.post("/sdk/queues/mail/pause")
    assert response.status_code == 403
    assert not QueuePause.objects.exists()
