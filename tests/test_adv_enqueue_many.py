"""Adversarial checks of enqueue_many's shared validation and the PostgreSQL many-row insert.

Two ``at`` datetimes in the same zone that differ only by ``fold`` (the two
readings of a wall time in the hour a DST change repeats) compare and hash equal
in Python, yet are two instants an hour apart: each job must run at its own.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from django_jobqueue import enqueue_job, enqueue_many
from django_jobqueue.models import Job
from tests.no_duplicate_helpers import JOB_TYPE

pytestmark = pytest.mark.django_db(transaction=True)

_PARIS = ZoneInfo("Europe/Paris")
#: 2030-10-27 02:30 happens twice in Paris: 00:30 UTC (fold 0) and 01:30 UTC (fold 1).
_EARLY = datetime(2030, 10, 27, 2, 30, tzinfo=_PARIS)
_LATE = _EARLY.replace(fold=1)


def test_the_two_readings_are_equal_in_python_but_an_hour_apart():
    assert _EARLY == _LATE and hash(_EARLY) == hash(_LATE)
    assert (_LATE.timestamp() - _EARLY.timestamp()) == 3600


def test_enqueue_many_keeps_each_jobs_at_when_only_fold_differs():
    """Same type, queue and options but for ``at``: the template cache must not reuse
    the first job's ``at`` for the second."""
    results = enqueue_many(
        [
            {"job_type": JOB_TYPE, "payload": 1, "at": _EARLY},
            {"job_type": JOB_TYPE, "payload": 2, "at": _LATE},
        ]
    )
    runs = [Job.objects.get(jid=r["jid"]).run_at.timestamp() for r in results]
    assert runs == [_EARLY.timestamp(), _LATE.timestamp()]


def test_bulk_insert_keeps_each_rows_at_when_only_fold_differs():
    """Different priorities (no shared template): the many-row insert must not bind
    the run_at column once because its values compare equal."""
    results = enqueue_many(
        [
            {"job_type": JOB_TYPE, "payload": 1, "at": _EARLY, "priority": 1},
            {"job_type": JOB_TYPE, "payload": 2, "at": _LATE, "priority": 2},
        ]
    )
    runs = [Job.objects.get(jid=r["jid"]).run_at.timestamp() for r in results]
    single = Job.objects.get(jid=enqueue_job(None, JOB_TYPE, 3, at=_LATE)["jid"]).run_at.timestamp()
    assert single == _LATE.timestamp()
    assert runs == [_EARLY.timestamp(), _LATE.timestamp()]
