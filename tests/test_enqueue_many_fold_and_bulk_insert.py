"""enqueue_many's shared validation and the PostgreSQL many-row insert, under hostile input.

Two ``at`` datetimes in the same zone that differ only by ``fold`` (the two
readings of a wall time in the hour a DST change repeats) compare and hash equal
in Python, yet are two instants an hour apart: each job must run at its own.
"""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from django_jobqueue import JobHandle, enqueue_job, enqueue_many
from django_jobqueue.core.exceptions import InvalidRequest
from django_jobqueue.models import Job
from django_jobqueue.store.registry import get_job_description
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


def test_a_job_with_a_non_text_option_name_is_refused_as_an_unknown_option():
    """``enqueue_many`` took ``InvalidOption`` for an option name that is not a string;
    the template key must not turn it into a bare TypeError (no index, no prefix)."""
    from django_jobqueue.core.exceptions import InvalidOption

    with pytest.raises(InvalidOption) as caught:
        enqueue_many(
            [{"job_type": JOB_TYPE, "payload": 1}, {"job_type": JOB_TYPE, 1: "x", "priority": 2}]
        )
    assert caught.value.index == 1
    assert str(caught.value).startswith("jobs[1]: ")
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"priority": 1}, {"priority": True}),
        ({"max_retry": 1}, {"max_retry": 1.0}),
        ({"delay": 1}, {"delay": True}),
        ({"timeout_ms": 1000}, {"timeout_ms": 1000.0}),
        ({"expires_ms": 1000}, {"expires_ms": 1000.5}),
    ],
)
def test_a_later_job_is_validated_as_if_alone(first, second):
    """Whatever enqueue_job refuses for the second job, enqueue_many refuses with its index."""
    from django_jobqueue.core.exceptions import JobQueueError

    try:
        enqueue_job(None, JOB_TYPE, 0, **second)
    except JobQueueError as exc:
        alone = type(exc)
    else:
        alone = None
    Job.objects.all().delete()
    jobs = [
        {"job_type": JOB_TYPE, "payload": 1, **first},
        {"job_type": JOB_TYPE, "payload": 2, **second},
    ]
    if alone is None:
        assert len(enqueue_many(jobs)) == 2
    else:
        with pytest.raises(alone) as caught:
            enqueue_many(jobs)
        assert caught.value.index == 1 and str(caught.value).startswith("jobs[1]: ")
        assert Job.objects.count() == 0


def test_a_later_payload_error_names_its_index():
    from django_jobqueue.core.exceptions import InvalidPayload

    jobs = [{"job_type": JOB_TYPE, "payload": i} for i in range(3)]
    jobs[2]["payload"] = {"a": "x\x00"}
    with pytest.raises(InvalidPayload) as caught:
        enqueue_many(jobs)
    assert caught.value.index == 2
    assert str(caught.value).startswith("jobs[2]: The payload of a ")
    assert Job.objects.count() == 0


_PAYLOADS = [
    None,
    "null",
    "a,b",
    "q\"uo'te",
    "back\\slash\\u0041",
    "é☃😀",
    {"k": None},
    [None],
    {"a,b": "[1,2]"},
    0,
    False,
    "",
    [],
    {},
    1.5e300,
    -0.0,
    10**30,
]


def test_bulk_rows_store_each_payload_as_a_single_enqueue_does():
    from tests.test_enqueue_fast import _raw_row

    many = enqueue_many([{"job_type": JOB_TYPE, "payload": p} for p in _PAYLOADS])
    singles = [enqueue_job(None, JOB_TYPE, p) for p in _PAYLOADS]
    for payload, a, b in zip(_PAYLOADS, many, singles, strict=True):
        row_a, row_b = _raw_row(a["jid"]), _raw_row(b["jid"])
        assert row_a["payload"] == row_b["payload"], payload
        assert Job.objects.get(jid=a["jid"]).payload == Job.objects.get(jid=b["jid"]).payload
        assert len(a["jid"]) == 32 and a["jid"][12] == "7" and a["jid"][16] in "89ab"


@pytest.mark.parametrize("batch", [None, 5, "ab", b"ab", {"job_type": JOB_TYPE}])
def test_a_batch_that_is_not_a_list_is_refused_whole(batch):
    """Not read as its letters or keys, nor a TypeError: a typed refusal, nothing written."""
    with pytest.raises(InvalidRequest, match=f"jobs must be a list .*got {type(batch).__name__}"):
        enqueue_many(batch)
    assert Job.objects.count() == 0


@pytest.mark.parametrize("payloads", [None, "abc", {"a": 1}])
def test_a_handles_payloads_that_are_not_a_list_are_refused_whole(payloads):
    with pytest.raises(InvalidRequest, match="payloads must be a list"):
        JobHandle(get_job_description(JOB_TYPE)).enqueue_many(payloads)
    assert Job.objects.count() == 0


def test_a_batch_of_large_non_ascii_payloads_goes_in():
    """Each payload's JSON text is 12 bytes per emoji (``\\ud83d\\ude00``), under
    MAX_PAYLOAD_BYTES; a MySQL statement is cut by those bytes as the driver sends
    them, not by the payload's characters (20 such rows in one statement were over
    ``max_allowed_packet``: "Server has gone away")."""
    payload = "\U0001f600" * 85_000  # 1,020,002 bytes of JSON text
    results = enqueue_many([{"job_type": JOB_TYPE, "payload": payload} for _ in range(20)])
    assert [r.status for r in results] == ["enqueued"] * 20
    assert Job.objects.count() == 20
    assert Job.objects.first().payload == payload
