"""A prune's batches: bounded, walking on from the last key, every due row gone and no other.

docs/horizon.md, "Prune at scale": each batch deletes at most ``batch_size`` rows and
starts after the last (finished_at, pk) the batch before saw, so rows that share a
``finished_at`` are neither skipped nor deleted twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from django_jobqueue import maintenance
from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store.batches import delete_in_batches
from tests.maintenance_helpers import make_job, make_jobs

pytestmark = pytest.mark.django_db

OLD = timedelta(days=30)


@contextmanager
def deleted_per_statement() -> Iterator[list[int]]:
    """Yield a list that gets the row count of every DELETE sent meanwhile."""
    counts: list[int] = []

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        result = execute(sql, params, many, context)
        if sql.lstrip().upper().startswith("DELETE"):
            counts.append(context["cursor"].rowcount)
        return result

    with connection.execute_wrapper(wrapper):
        yield counts


def test_prune__batches_are_bounded_and_everything_due_goes() -> None:
    make_jobs(23, status=JobStatus.DONE, age=OLD)
    make_jobs(4, status=JobStatus.CANCELLED, age=OLD)
    stamp = timezone.now() - OLD
    # Never stamped with finished_at: its updated_at decides.
    unstamped = make_jobs(2, status=JobStatus.DONE, finished_at=None, updated_at=stamp)
    kept = {
        make_job(status=JobStatus.DONE, age=timedelta(hours=1)).pk,
        make_job(status=JobStatus.DONE, finished_at=None, updated_at=timezone.now()).pk,
        make_job(status=JobStatus.INIT).pk,
        make_job(status=JobStatus.RETRY, run_at=stamp).pk,
        make_job(status=JobStatus.PROCESSING, lease_owner="w").pk,
        make_job(status=JobStatus.MAX_RETRY, age=OLD, id_held_until=stamp).pk,  # CLEAN_ERROR off
        make_job(
            status=JobStatus.DONE,
            age=OLD,
            job_id="held",
            id_held_until=timezone.now() + timedelta(hours=1),
        ).pk,
    }

    with deleted_per_statement() as counts:
        count = maintenance.prune("default", batch_size=5)

    assert count == maintenance.PruneCount(done=25, cancelled=4, dead=0, dead_included=False)
    assert counts and max(counts) <= 5
    assert sum(counts) == 29
    # 23 stamped done: 5 batches (the last of 3); 2 unstamped: 1; 4 cancelled: 1.
    assert counts == [5, 5, 5, 5, 3, 2, 4]
    assert set(Job.objects.values_list("pk", flat=True)) == kept
    assert not Job.objects.filter(pk__in=[job.pk for job in unstamped]).exists()


def test_prune__rows_sharing_a_finished_at_are_all_deleted_once() -> None:
    stamp = timezone.now() - OLD
    tied = make_jobs(7, status=JobStatus.DONE, finished_at=stamp, updated_at=stamp)
    later = make_jobs(3, status=JobStatus.DONE, finished_at=stamp + timedelta(seconds=1))

    with deleted_per_statement() as counts:
        count = maintenance.prune("default", batch_size=2)

    assert count.done == 10
    assert counts == [2, 2, 2, 2, 2]
    assert not Job.objects.filter(pk__in=[job.pk for job in [*tied, *later]]).exists()


def test_prune__dead_letters_in_batches_when_asked() -> None:
    gone = make_jobs(5, status=JobStatus.MAX_RETRY, age=OLD, id_held_until=timezone.now() - OLD)
    gone += make_jobs(2, status=JobStatus.ERROR, age=OLD, id_held_until=timezone.now() - OLD)
    young = make_job(status=JobStatus.ERROR, age=timedelta(hours=1))

    with deleted_per_statement() as counts:
        count = maintenance.prune("default", dead=True, batch_size=3)

    assert (count.done, count.cancelled, count.dead) == (0, 0, 7)
    assert max(counts) <= 3 and sum(counts) == 7
    assert list(Job.objects.values_list("pk", flat=True)) == [young.pk]


def test_delete_in_batches__a_row_changed_between_select_and_delete_stays() -> None:
    jobs = make_jobs(6, status=JobStatus.DONE, age=OLD)
    retried = jobs[1]
    selects = 0

    def wrapper(
        execute: Callable[..., Any], sql: str, params: Any, many: bool, context: Any
    ) -> Any:
        nonlocal selects
        result = execute(sql, params, many, context)
        if sql.lstrip().upper().startswith("SELECT"):
            selects += 1
            if selects == 1:  # an operator retries it between the batch's two statements
                Job._base_manager.filter(pk=retried.pk).update(
                    status=JobStatus.INIT, waiting=True, finished_at=None
                )
        return result

    done = Job.objects.filter(status=JobStatus.DONE)
    with connection.execute_wrapper(wrapper):
        deleted = delete_in_batches(done, 4, key="finished_at")

    assert deleted == 5
    assert list(Job.objects.values_list("pk", "status")) == [(retried.pk, JobStatus.INIT)]


def test_prune__pause_ms_must_be_a_whole_number_of_ms() -> None:
    with pytest.raises(ValueError, match=r"pause_ms must be an integer >= 0: got -1\."):
        maintenance.prune("default", pause_ms=-1)


def test_prune_command__pause_ms_option() -> None:
    make_jobs(3, status=JobStatus.DONE, age=OLD)

    call_command("jobqueue", "prune", "--batch-size", "2", "--pause-ms", "1", stdout=_Null())

    assert not Job.objects.exists()
    with pytest.raises(CommandError, match=r"must be an integer from 0 to 60,000 ms: got 'x'"):
        call_command("jobqueue", "prune", "--pause-ms", "x", stdout=_Null())


class _Null:
    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass
