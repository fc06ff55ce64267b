"""The django.tasks backend: Django's documented task behaviours on our workers.

Each section follows docs/topics/tasks.txt (defining, enqueueing, transactions,
results, return values, errors) against ``JobQueueBackend``, with real workers: an
in-process foreman (``drain``) or ``runworkers --burst`` subprocesses.
"""

from __future__ import annotations

import importlib
import sys
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.apps import apps as django_apps
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from django_jobqueue import JobDescription, enqueue_job, reaping, storage
from django_jobqueue.core.exceptions import ImproperlyConfiguredJobQueue, UnknownJobType
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store import registry
from django_jobqueue.store.registry import get_job_description, register_job_type_resolver

tasks_api = pytest.importorskip("django_jobqueue.core.compat", exc_type=ImproperlyConfigured)

from django_jobqueue.core.compat import (  # noqa: E402
    SUCCESSFUL,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_jobqueue.tasks import (  # noqa: E402
    JobQueueBackend,
    job_priority_to_task_priority,
    job_status_to_task_status,
    run_task_job,
    task_job_description,
    task_options,
    task_priority_to_job_priority,
)
from tests.testapp.jobtypes import tasks as t  # noqa: E402
from tests.workers_helpers import drain, run_workers  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)

#: Retries due at once, so a burst foreman runs every attempt.
NO_BACKOFF = {"BACKOFF_BASE_MS": 0, "BACKOFF_JITTER": 0}


@pytest.fixture
def sent():
    """Collect Django's task signals: a list of (signal name, status, result id)."""
    seen: list[tuple[str, str, str]] = []

    def receiver(name):
        def record(sender, task_result, **kwargs):
            assert sender is JobQueueBackend
            seen.append((name, str(task_result.status), task_result.id))

        return record

    receivers = {
        task_enqueued: receiver("enqueued"),
        task_started: receiver("started"),
        task_finished: receiver("finished"),
    }
    for signal, func in receivers.items():
        signal.connect(func)
    yield seen
    for signal, func in receivers.items():
        signal.disconnect(func)


# Translations, both ways -------------------------------------------------------------


def test_priority__larger_task_priority_becomes_smaller_job_priority():
    assert task_priority_to_job_priority(100) == 1
    assert task_priority_to_job_priority(0) == 101
    assert task_priority_to_job_priority(-100) == 201
    job_priorities = [task_priority_to_job_priority(p) for p in range(-100, 101)]
    assert job_priorities == sorted(job_priorities, reverse=True)
    assert len(set(job_priorities)) == 201


def test_priority__job_priority_maps_back_to_the_task_priority():
    for priority in range(-100, 101):
        assert job_priority_to_task_priority(task_priority_to_job_priority(priority)) == priority
    # Edited by hand outside the range: clamped.
    assert job_priority_to_task_priority(500) == -100


def test_priority__out_of_range_is_refused():
    with pytest.raises(InvalidTask):
        task_priority_to_job_priority(101)


def test_status__every_job_status_maps_to_a_task_status():
    expected = {
        JobStatus.INIT: TaskResultStatus.READY,
        JobStatus.RETRY: TaskResultStatus.READY,
        JobStatus.BLOCKED: TaskResultStatus.READY,
        JobStatus.PROCESSING: TaskResultStatus.RUNNING,
        JobStatus.ERROR: TaskResultStatus.FAILED,
        JobStatus.MAX_RETRY: TaskResultStatus.FAILED,
        JobStatus.CANCELLED: TaskResultStatus.FAILED,
        JobStatus.DONE: SUCCESSFUL,
    }
    assert {s: job_status_to_task_status(s) for s in JobStatus.values} == expected
    with pytest.raises(ValueError, match="'READY' is not a job status"):
        job_status_to_task_status("READY")


# Configuring the backend -------------------------------------------------------------


def test_backend__is_configured_with_every_feature():
    backend = task_backends["default"]
    assert isinstance(backend, JobQueueBackend)
    assert backend.supports_defer
    assert backend.supports_async_task
    assert backend.supports_get_result
    assert backend.supports_priority
    assert list(backend.check()) == []


def test_backend__invalid_options_are_a_check_error_and_refused_at_enqueue():
    tasks_setting = {
        "default": {
            "BACKEND": "django_jobqueue.tasks.JobQueueBackend",
            "OPTIONS": {"max_retry": -1, "retries": 2},
        }
    }
    with override_settings(TASKS=tasks_setting):
        errors = list(task_backends["default"].check())
        assert [e.id for e in errors] == ["django_jobqueue.E010"]
        assert "unknown keys ['retries']" in errors[0].msg
        with pytest.raises(ImproperlyConfiguredJobQueue, match="unknown keys"):
            t.add.enqueue(1, 2)
    assert Job.objects.count() == 0


def test_backend__invalid_options_show_in_the_system_checks():
    # `manage.py check` runs the backend's check: Django 6 by itself, Django 5.2 only
    # with the backport's app installed as the README ("Using Django's @task") says.
    from django.core.checks import run_checks

    tasks_setting = {
        "default": {
            "BACKEND": "django_jobqueue.tasks.JobQueueBackend",
            "OPTIONS": {"retries": 2},
        }
    }
    with override_settings(TASKS=tasks_setting):
        ids = [message.id for message in run_checks()]
    assert ids.count("django_jobqueue.E010") == 1


# Defining tasks -------------------------------------------------------------------------


def test_define__task_options_above_task_is_refused():
    with pytest.raises(ImproperlyConfiguredJobQueue, match="put it below @task"):
        task_options(max_retry=1)(t.add)


def test_define__task_options_are_validated_at_decoration():
    with pytest.raises(ImproperlyConfiguredJobQueue, match="timeout"):
        task_options(timeout="soon")


def test_define__a_queue_outside_queues_is_refused():
    with pytest.raises(InvalidTask, match="Queue 'nope' is not valid"):
        t.add.using(queue_name="nope")


# Enqueueing -----------------------------------------------------------------------------


def test_enqueue__creates_an_ordinary_job(sent):
    result = t.echo.enqueue(1, "two", three=[3])
    job = Job.objects.get(jid=result.id)
    assert job.job_type == "tests.testapp.jobtypes.tasks.echo"
    assert job.queue == "tasks-other"
    assert job.priority == task_priority_to_job_priority(50)
    assert job.status == JobStatus.INIT
    assert job.payload["args"] == [1, "two"]
    assert job.payload["kwargs"] == {"three": [3]}
    assert result.status == TaskResultStatus.READY
    assert result.task.func is t.echo.func
    assert result.task.priority == 50
    assert result.enqueued_at == job.created_at
    assert result.started_at is None and result.finished_at is None
    assert result.attempts == 0 and result.errors == []
    with pytest.raises(ValueError, match="not finished yet"):
        _ = result.return_value
    assert sent == [("enqueued", "READY", result.id)]


def test_enqueue__arguments_round_trip_through_json():
    result = t.echo.enqueue((1, 2), key=(3,))
    assert result.args == [[1, 2]]
    assert result.kwargs == {"key": [3]}


def test_enqueue__arguments_that_are_not_json_raise_type_error_and_write_nothing():
    with pytest.raises(TypeError):
        t.add.enqueue(timezone.now(), 1)
    assert Job.objects.count() == 0


def test_enqueue__using_changes_priority_and_claim_order_follows_it():
    low = t.add.using(priority=-100).enqueue(1, 1)
    default = t.add.enqueue(1, 2)
    high = t.add.using(priority=100).enqueue(1, 3)
    middle = t.add.using(priority=10).enqueue(1, 4)
    claimed = storage.claim("default", owner="test", limit=10)
    assert [j.jid for j in claimed] == [high.id, middle.id, default.id, low.id]


def test_enqueue__run_after_defers_the_job():
    later = timezone.now() + timedelta(hours=1)
    result = t.add.using(run_after=later).enqueue(1, 2)
    job = Job.objects.get(jid=result.id)
    assert job.run_at == later
    assert result.task.run_after == later
    assert storage.claim("default", owner="test") == []
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.READY


def test_enqueue__aenqueue_and_aget_result():
    async def scenario():
        result = await t.add.aenqueue(2, 5)
        fetched = await t.add.aget_result(result.id)
        return result, fetched

    result, fetched = async_to_sync(scenario)()
    assert fetched.id == result.id and fetched.args == [2, 5]


# Transactions ---------------------------------------------------------------------------


def test_transaction__the_job_joins_the_callers_transaction(sent):
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        t.add.enqueue(1, 2)
        assert Job.objects.count() == 1
        raise Rollback
    assert Job.objects.count() == 0
    assert sent == []  # task_enqueued waits for the commit

    with transaction.atomic():
        result = t.add.enqueue(1, 2)
        assert sent == []
    assert sent == [("enqueued", "READY", result.id)]
    assert Job.objects.get(jid=result.id).status == JobStatus.INIT


# Running, results, return values ------------------------------------------------------


def test_run__a_worker_runs_the_task_and_stores_its_result(sent):
    result = t.add.enqueue(2, 3)
    assert drain() == {"done": 1}
    assert result.status == TaskResultStatus.READY  # as it was fetched
    result.refresh()
    assert result.status == SUCCESSFUL
    assert result.return_value == 5
    assert result.is_finished
    assert result.attempts == 1
    assert result.worker_ids[0]
    assert result.started_at is not None
    assert result.last_attempted_at == result.started_at
    assert result.finished_at >= result.started_at >= result.enqueued_at
    assert result.errors == []
    assert sent == [
        ("enqueued", "READY", result.id),
        ("started", "RUNNING", result.id),
        ("finished", str(SUCCESSFUL), result.id),  # "SUCCEEDED" before backport 0.12
    ]
    fetched = t.add.get_result(result.id)
    assert (fetched.status, fetched.return_value) == (SUCCESSFUL, 5)


def test_run__async_tasks_run_too():
    result = t.async_mul.enqueue(6, 7)
    drain()
    result.refresh()
    assert (result.status, result.return_value) == (SUCCESSFUL, 42)


def test_run__arefresh():
    result = t.add.enqueue(1, 1)
    drain()
    async_to_sync(result.arefresh)()
    assert result.return_value == 2


def test_run__takes_context_gets_the_task_context():
    result = t.context_info.enqueue(label="x")
    drain()
    result.refresh()
    value = result.return_value
    assert value["label"] == "x"
    assert value["attempt"] == 1
    assert value["id"] == result.id
    assert value["status"] == "RUNNING"
    assert value["worker_ids"] == result.worker_ids


def test_run__a_task_failing_twice_then_succeeding(sent):
    with override_settings(JOBQUEUE=NO_BACKOFF):
        result = t.flaky.enqueue(key="k", failures=2)
        stats = drain(concurrency=1)
    assert stats == {"retry": 2, "done": 1}
    result.refresh()
    assert result.status == SUCCESSFUL
    assert result.attempts == 3
    assert len(result.worker_ids) == 3
    assert len(result.errors) == 2
    for number, error in enumerate(result.errors, start=1):
        assert error.exception_class is ValueError
        assert error.exception_class_path == "builtins.ValueError"
        assert f"attempt {number} fails on purpose" in error.traceback
        assert error.traceback.startswith("Traceback (most recent call last):")
    assert result.return_value == {"key": "k", "attempt": 3}  # TaskContext.attempt
    assert result.started_at <= result.last_attempted_at
    mine = [(name, status) for name, status, rid in sent if rid == result.id]
    assert mine == [
        ("enqueued", "READY"),
        ("started", "RUNNING"),
        ("started", "RUNNING"),
        ("started", "RUNNING"),
        ("finished", str(SUCCESSFUL)),
    ]


def test_run__a_failing_task_is_failed_with_its_error(sent):
    result = t.boom.enqueue("bad key")
    assert drain() == {"max_retry": 1}
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.is_finished and result.finished_at is not None
    assert [e.exception_class for e in result.errors] == [KeyError]
    assert "bad key" in result.errors[0].traceback
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value
    assert sent[-1] == ("finished", "FAILED", result.id)


def test_run__non_retryable_error_fails_at_once():
    with override_settings(JOBQUEUE=NO_BACKOFF):
        result = t.give_up.enqueue("stop")
        assert drain() == {"error": 1}
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.attempts == 1
    assert result.errors[0].exception_class_path == (
        "django_jobqueue.core.exceptions.NonRetryableError"
    )


def test_run__a_return_value_that_is_not_json_fails_the_task():
    result = t.not_json.enqueue()
    assert drain() == {"max_retry": 1}
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class is TypeError


def test_run__a_worker_that_died_counts_as_a_failed_attempt():
    from django.db.models.functions import Now

    with override_settings(JOBQUEUE=NO_BACKOFF):
        result = t.context_info.enqueue("after a crash")
        [claimed] = storage.claim("default", owner="dead-worker")
        Job.objects.filter(pk=claimed.pk).update(lease_expires_at=Now() - timedelta(seconds=5))
        assert reaping.reap_expired("default") == 1
        result.refresh()
        assert result.status == TaskResultStatus.READY
        [error] = result.errors
        assert error.exception_class_path == "django_jobqueue.core.exceptions.JobQueueError"
        assert "lease expired" in error.traceback
        assert drain() == {"done": 1}
    result.refresh()
    assert result.status == SUCCESSFUL
    assert result.return_value["attempt"] == 2
    assert result.attempts == 2
    assert result.worker_ids[0] == ""


def test_run__runworkers_subprocess_runs_tasks():
    results = [t.add.enqueue(20, 22), t.async_mul.enqueue(3, 4), t.context_info.enqueue("s")]
    done = run_workers("--burst")
    assert done.returncode == 0, done.stderr
    for result in results:
        result.refresh()
    assert [r.status for r in results] == [SUCCESSFUL] * 3
    assert [results[0].return_value, results[1].return_value] == [42, 12]
    assert results[2].return_value["attempt"] == 1
    assert results[2].return_value["worker_ids"] == results[2].worker_ids


# get_result ------------------------------------------------------------------------------


def test_get_result__unknown_id_raises():
    backend = task_backends["default"]
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("0" * 32)
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(backend.aget_result)("nope")


def test_get_result__a_job_that_is_not_a_task_is_not_a_result():
    answer = t.plain.enqueue({"x": 1})
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(answer.jid)


def test_get_result__another_tasks_id_is_a_mismatch():
    result = t.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        t.echo.get_result(result.id)


# Options: retries, timeout, unique keys ----------------------------------------------


def test_options__backend_defaults_decorator_and_per_task_settings():
    tasks_setting = {
        "default": {
            "BACKEND": "django_jobqueue.tasks.JobQueueBackend",
            "QUEUES": ["default", "tasks-other"],
            "OPTIONS": {
                "max_retry": 7,
                "timeout": "45s",
                "task_options": {"tests.testapp.jobtypes.tasks.boom": {"max_retry": 9}},
            },
        }
    }
    with override_settings(TASKS=tasks_setting):
        plain = Job.objects.get(jid=t.add.enqueue(1, 2).id)
        decorated = Job.objects.get(jid=t.flaky.enqueue("k", 0).id)
        per_task = Job.objects.get(jid=t.boom.enqueue("m").id)
    assert (plain.max_retry, plain.timeout_ms) == (7, 45_000)
    assert (decorated.max_retry, decorated.timeout_ms) == (3, 45_000)  # @task_options
    assert per_task.max_retry == 9  # OPTIONS["task_options"] wins over @task_options(0)


def test_options__unique_task_returns_the_holders_result():
    first = t.unique_add.enqueue(1, 2)
    again = t.unique_add.enqueue(1, 2)
    other = t.unique_add.enqueue(2, 1)
    assert again.id == first.id
    assert other.id != first.id
    assert Job.objects.count() == 2


# Job type resolution and the framework's absence ---------------------------------


def test_resolve__only_task_paths_resolve():
    assert task_job_description(t.add.module_path) is not None
    assert task_job_description("os.path.join") is None  # importable, not a Task
    assert task_job_description("not_a_module_anywhere.func") is None
    assert "not_a_module_anywhere" not in sys.modules
    with pytest.raises(UnknownJobType):
        enqueue_job(None, "tests.testapp.jobtypes.tasks.missing", None)


def test_resolve__the_app_registers_the_task_resolver_once_and_resolvers_run_in_order(
    monkeypatch,
):
    assert registry._resolvers.count(task_job_description) == 1
    django_apps.get_app_config("django_jobqueue").ready()  # ready() again: still once
    assert registry._resolvers.count(task_job_description) == 1

    monkeypatch.setattr(registry, "_resolvers", registry._resolvers)
    first = JobDescription(name="resolved.first", handler=t.add.func)
    asked: list[str] = []

    def resolve_first(name):
        asked.append(name)
        return first if name.startswith("resolved.") else None

    def resolve_second(name):
        return JobDescription(name=name, handler=t.add.func)

    register_job_type_resolver(resolve_first)
    register_job_type_resolver(resolve_second)
    register_job_type_resolver(resolve_first)
    assert registry._resolvers[-2:] == (resolve_first, resolve_second)
    # A task path is answered by the task resolver, registered first.
    assert get_job_description(t.add.module_path).handler is run_task_job
    assert get_job_description("resolved.anything") is first
    assert get_job_description("other.name").name == "other.name"
    assert asked == ["resolved.anything", "other.name"]


def test_compat__without_django_tasks_nor_backport_the_error_names_both(monkeypatch):
    import django_jobqueue.core.compat as compat

    for name in list(sys.modules):
        if name == "django.tasks" or name.startswith(("django.tasks.", "django_tasks")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "django.tasks", None)
    monkeypatch.setitem(sys.modules, "django_tasks", None)
    monkeypatch.delitem(sys.modules, "django_jobqueue.core.compat")
    for name in list(sys.modules):
        if name == "django_jobqueue.tasks" or name.startswith("django_jobqueue.tasks."):
            monkeypatch.delitem(sys.modules, name)
    # A process set up without a tasks framework: no resolver registered yet.
    monkeypatch.setattr(registry, "_resolvers", ())
    try:
        with pytest.raises(ImproperlyConfigured) as caught:
            importlib.import_module("django_jobqueue.core.compat")
        message = str(caught.value)
        assert "Django 6.0 or later" in message
        assert "django-tasks" in message
        assert caught.value.code == "tasks_framework_missing"
        # The app gets ready without the task resolver, and the registry treats task
        # paths as unknown job types then, not as a crash.
        django_apps.get_app_config("django_jobqueue").ready()
        assert [
            r for r in registry._resolvers if r.__module__.startswith("django_jobqueue.tasks")
        ] == []
        with pytest.raises(UnknownJobType):
            enqueue_job(None, "tests.testapp.jobtypes.tasks.add", None)
    finally:
        monkeypatch.undo()
    assert importlib.import_module("django_jobqueue.core.compat") is compat
