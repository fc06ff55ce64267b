"""Hostile input and hostile handlers: a typed error, nothing written, nothing stuck.

DESIGN.md "Guarantees": nothing is lost on bad input, the call fails with a typed
error and writes nothing, and the caller's transaction stays usable. Each case here
once leaked a raw database or Python error on at least one of the three databases.
"""

from __future__ import annotations

import base64
import io
import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import transaction
from django.utils import timezone

from django_jobqueue import enqueue_job
from django_jobqueue.core.durations import parse_duration
from django_jobqueue.core.exceptions import InvalidOption, JobQueueError
from django_jobqueue.ids import Queue
from django_jobqueue.models import Job, JobStatus, ScheduleJob
from django_jobqueue.schedules import add_job_with_schedule
from tests.workers_helpers import drain


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def _cursor(data: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode()


BAD_ENQUEUES: dict[str, tuple[tuple[Any, ...], dict[str, Any]]] = {
    "payload nested 100,000 deep": (("adv", "adv.echo", _nested(100_000)), {}),
    "payload nested 32 deep (MariaDB keeps 31)": (("adv", "adv.echo", _nested(32)), {}),
    "payload string with NUL": (("adv", "adv.echo", {"text": "a\x00b"}), {}),
    "payload key with NUL": (("adv", "adv.echo", {"a\x00": 1}), {}),
    "payload lone surrogate": (("adv", "adv.echo", ["\ud800"]), {}),
    "queue with NUL": (("adv\x00", "adv.echo", None), {}),
    "queue lone surrogate": (("\ud800", "adv.echo", None), {}),
    "unique key with NUL": (("adv", "adv.echo", None), {"unique_key": "k\x00"}),
    "job type not a string": (("adv", 5, None), {}),
    "job type None": (("adv", None, None), {}),
    "job type a list": (("adv", ["adv.echo"], None), {}),
    "delay past year 9999": (("adv", "adv.echo", None), {"delay": 10**12}),
    "delay timedelta.max": (("adv", "adv.echo", None), {"delay": timedelta.max}),
    "unique_ttl_ms NaN": (
        ("adv", "adv.echo", None),
        {"unique_key": "k", "unique_ttl_ms": float("nan")},
    ),
}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", BAD_ENQUEUES)
def test_enqueue__bad_input_is_a_typed_error_and_writes_nothing(case: str) -> None:
    args, options = BAD_ENQUEUES[case]
    with transaction.atomic():
        with pytest.raises(JobQueueError):
            enqueue_job(*args, **options)
        # The caller's transaction is still usable.
        assert Job.objects.count() == 0
    assert Job.objects.count() == 0


@pytest.mark.django_db(transaction=True)
def test_enqueue__deepest_portable_payload_round_trips() -> None:
    result = enqueue_job("adv", "adv.echo", _nested(31))
    assert Job.objects.get(jid=result.jid).payload == _nested(31)


def _ids_calls() -> dict[str, Any]:
    queue = Queue("adv", job_type="adv.echo")
    return {
        "add id with NUL": lambda: queue.add(1, id="a\x00b"),
        "add value with NUL": lambda: queue.add("a\x00b", id="x"),
        "add delay past year 9999": lambda: queue.add(1, id="x", delay=10**12),
        "set id with NUL": lambda: queue.set("a\x00b", 1),
        "set value lone surrogate": lambda: queue.set("x", "\udc80"),
        "set value nested 100,000 deep": lambda: queue.set("x", _nested(100_000)),
        "set delay past year 9999": lambda: queue.set("x", 1, delay=10**12),
        "update delay past year 9999": lambda: queue.update("x", 1, delay=10**12),
        "cancel id with NUL": lambda: queue.cancel("a\x00b"),
        "get id with NUL": lambda: queue.get("a\x00b"),
        "list prefix with NUL": lambda: queue.list(prefix="a\x00"),
        "list cursor past bigint": lambda: queue.list(after=_cursor({"o": "c", "k": 2**70})),
        "list failed cursor naive time": lambda: queue.list(
            state="failed", after=_cursor({"o": "f", "t": "2020-01-01T00:00:00", "k": 1})
        ),
        "queue name with NUL": lambda: Queue("adv\x00", job_type="adv.echo"),
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("case", list(_ids_calls()))
def test_ids__bad_input_is_a_typed_error_and_writes_nothing(case: str) -> None:
    Queue("adv", job_type="adv.echo").set("x", "before", delay="1h")
    with transaction.atomic():
        with pytest.raises(JobQueueError):
            _ids_calls()[case]()
        assert Job.objects.count() == 1
    job = Job.objects.get()
    assert (job.payload, job.status) == ("before", JobStatus.INIT)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["nul", "surrogate", "deep"])
def test_worker__unstorable_result_fails_the_job_for_good_at_once(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    jid = enqueue_job("adv", "adv.echo", {"result": kind}).jid
    with caplog.at_level(logging.ERROR, logger="django_jobqueue"):
        outcomes = drain(["adv"], concurrency=1)
    job = Job.objects.get(jid=jid)
    assert (outcomes, job.status, job.attempt) == ({"error": 1}, JobStatus.ERROR, 1)
    assert "not JSON" in job.message
    # The worker's log says why, at ERROR, as for a handler that raised.
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert f"job failed jid={jid}" in line and "not JSON" in line


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["nul", "surrogate", "broken str"])
def test_worker__unprintable_error_is_stored_as_the_attempts_failure(kind: str) -> None:
    jid = enqueue_job("adv", "adv.raise", {"text": kind}).jid
    outcomes = drain(["adv"], concurrency=1)
    job = Job.objects.get(jid=jid)
    assert (outcomes, job.status) == ({"max_retry": 1}, JobStatus.MAX_RETRY)
    assert job.message.startswith(("ValueError: bad", "_BrokenStr"))
    assert "hostile.py" in job.errors[0]["traceback"]


@pytest.mark.parametrize("delay", ["99999999999d", 10**20, "1" * 400])
def test_durations__overflowing_duration_is_a_typed_error(delay: Any) -> None:
    with pytest.raises(InvalidOption):
        parse_duration(delay, name="delay")


@pytest.mark.parametrize("delay", ["-5s", " -500ms", "-1"])
def test_durations__negative_string_is_named_negative(delay: str) -> None:
    with pytest.raises(InvalidOption, match=r"^delay must not be negative: got "):
        parse_duration(delay, name="delay")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "argv",
    [
        ["prune", "--retention", "99999999999d"],
        ["prune", "--retention", "3650000d"],
        ["prune", "--dead", "--keep", "99999999999d"],
        ["prune", "--batch-size", "99999999999999999999"],
        # Bytes that are not UTF-8 reach argv as lone surrogates (surrogateescape).
        ["status", "--queue", "q\udcff"],
        ["retry", "--queue", "q\udcff"],
        ["retry", "--jid", "x\udcff"],
        ["retry", "--type", "t\udcff", "--dry-run"],
        ["schedules", "--run-now", "a\udcff"],
    ],
)
def test_jobqueue_command__bad_flag_is_a_command_error(argv: list[str]) -> None:
    enqueue_job("adv", "adv.echo", None)
    with pytest.raises(CommandError):
        call_command("jobqueue", *argv, stdout=io.StringIO(), stderr=io.StringIO())
    assert Job.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("name", ["a\x00b", "\ud800", "plan\udcff"])
def test_schedules__name_no_database_stores_is_a_typed_error(name: str) -> None:
    with transaction.atomic():
        with pytest.raises(InvalidOption):
            add_job_with_schedule("adv.echo", at=timezone.now() + timedelta(hours=1), name=name)
        assert ScheduleJob.objects.count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("result_id", ["x\x00", "\ud800", "a" * 5000])
def test_tasks__get_result_of_impossible_id_does_not_exist(result_id: str) -> None:
    from django_jobqueue.core.compat import TaskResultDoesNotExist, task_backends

    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(task_backends["default"].aget_result)(result_id)
