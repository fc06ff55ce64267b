"""A worker process collects young objects at ``JOBQUEUE["WORKER_GC_THRESHOLD"]``
(README "Speed"): a job run by a real ``runworkers`` reports the threshold of its
process, one process and under the supervisor; 0 leaves Python's own."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.test import override_settings

from django_jobqueue import enqueue_job
from django_jobqueue.core.conf import DEFAULTS, validate_settings
from django_jobqueue.core.validation import MAX_INT
from django_jobqueue.models import Job, JobStatus
from tests.workers_helpers import run_workers

pytestmark = pytest.mark.django_db(transaction=True)


def threshold_in_a_worker(processes: int) -> int:
    """Run one ``worker.gc_threshold`` job with ``runworkers --burst``; return its result."""
    jid = enqueue_job(None, "worker.gc_threshold")["jid"]
    proc = run_workers("--burst", "--processes", str(processes))
    assert proc.returncode == 0, proc.stderr
    job = Job.objects.get(jid=jid)
    assert job.status == JobStatus.DONE, job.errors
    return job.result


@pytest.mark.parametrize("processes", [1, 2])
def test_a_worker_process_collects_young_objects_at_the_setting(processes):
    assert DEFAULTS["WORKER_GC_THRESHOLD"] == 50_000
    assert threshold_in_a_worker(processes) == 50_000
    with override_settings(JOBQUEUE={"WORKER_GC_THRESHOLD": 120_000}):
        assert threshold_in_a_worker(processes) == 120_000


def test_zero_leaves_pythons_own_threshold():
    own = subprocess.run(  # noqa: S603 (our own interpreter)
        [sys.executable, "-c", "import gc; print(gc.get_threshold()[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    with override_settings(JOBQUEUE={"WORKER_GC_THRESHOLD": 0}):
        assert threshold_in_a_worker(1) == int(own.stdout)


@pytest.mark.parametrize("value", [-1, MAX_INT + 1, 1.5, "50000", True])
def test_a_threshold_that_is_not_a_whole_number_from_0__is_a_settings_error(value):
    with override_settings(JOBQUEUE={"WORKER_GC_THRESHOLD": value}):
        (error,) = validate_settings()
    assert error.startswith("JOBQUEUE['WORKER_GC_THRESHOLD'] must be an integer from 0 to ")
