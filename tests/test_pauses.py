"""Queue pause and resume (django_jobqueue.store.pauses)."""

from __future__ import annotations

import time

import pytest

from django_jobqueue.core.exceptions import InvalidOption
from django_jobqueue.models import QueuePause
from django_jobqueue.store import pauses

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    pauses.clear_cache()
    yield
    pauses.clear_cache()


def test_pause_and_resume__report_whether_they_changed_anything():
    assert pauses.pause_queue("default", "emails", by="ops") is True
    assert pauses.pause_queue("default", "emails") is False
    assert QueuePause.objects.get().paused_by == "ops"
    assert pauses.paused_queues("default") == {"emails"}
    assert pauses.resume_queue("default", "emails") is True
    assert pauses.resume_queue("default", "emails") is False
    assert pauses.paused_queues("default") == frozenset()


def test_paused_queues__cached_reads_cost_no_query(django_assert_num_queries):
    pauses.pause_queue("default", "a")
    with django_assert_num_queries(1):
        assert pauses.paused_queues("default") == {"a"}
        for _ in range(50):
            assert pauses.paused_queues("default") == {"a"}


def test_paused_queues__sees_another_process_pause_within_the_cache_age(monkeypatch):
    # The cache's clock is held still, then moved past the cache age: on a loaded
    # machine (CI runs its legs at once) real time could pass 0.5 s between two lines.
    now = [time.monotonic()]
    monkeypatch.setattr(pauses.time, "monotonic", lambda: now[0])
    assert pauses.paused_queues("default") == frozenset()
    QueuePause.objects.create(queue="b")  # as another process would
    assert pauses.paused_queues("default") == frozenset()  # cached
    now[0] += pauses.CACHE_SECONDS + 0.05
    assert pauses.paused_queues("default") == {"b"}


def test_pause_queue__rejects_bad_names():
    with pytest.raises(InvalidOption, match="1 to 100 characters"):
        pauses.pause_queue("default", "")
    with pytest.raises(InvalidOption, match="1 to 100 characters"):
        pauses.resume_queue("default", "x" * 101)


def test_command__pauses_and_resumes():
    from io import StringIO

    from django.core.management import CommandError, call_command

    out = StringIO()
    call_command("jobqueue", "pause", "mail", stdout=out)
    call_command("jobqueue", "pause", "mail", stdout=out)
    call_command("jobqueue", "resume", "mail", stdout=out)
    assert out.getvalue().splitlines() == [
        "Queue mail paused.",
        "Queue mail was already paused.",
        "Queue mail resumed.",
    ]
    with pytest.raises(CommandError, match="1 to 100 characters"):
        call_command("jobqueue", "pause", "x" * 101)
