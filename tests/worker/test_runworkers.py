"""``manage.py runworkers`` as real subprocesses: throughput, SIGKILL, SIGTERM, flags."""

from __future__ import annotations

import os
import re
import signal
import time
from itertools import pairwise
from socket import gethostname

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test import override_settings

from django_jobqueue import enqueue_job, enqueue_many
from django_jobqueue.models import Job, JobStatus, QueuePause
from tests.settings_own_logging import OWN_FORMAT
from tests.testapp.models import RunRecord
from tests.workers_helpers import (
    HIGH_THROUGHPUT_ARGS,
    HIGH_THROUGHPUT_JOBQUEUE,
    StartedWorkers,
    drain_once_each,
    run_workers,
)

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout_s: float = 90) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def sigterm_when(proc, ready, *, after_s: float = 0.0) -> tuple[str, str]:
    """Once ``ready()`` holds (and ``after_s`` more), SIGTERM the runworkers ``proc``
    and return its (stdout, stderr); it is killed if it outlives that."""
    try:
        assert wait_for(ready, timeout_s=60)
        time.sleep(after_s)
        proc.send_signal(signal.SIGTERM)
        return proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()


def drain_shape() -> tuple[int, int, int]:
    """(processes, threads, jobs): 4x8 and 2,000 jobs; SQLite 2x4 and 500 (one writer)."""
    if connection.vendor == "sqlite":
        return 2, 4, 500
    return 4, 8, 2_000


def test_processes_drain_every_job_exactly_once():
    processes, threads, count = drain_shape()
    _proc, elapsed = drain_once_each(processes, threads, count)
    print(  # noqa: T201 (the measured rate, shown with pytest -s)
        f"\n{connection.vendor}: {processes} processes x {threads} threads drained "
        f"{count} jobs in {elapsed:.2f} s = {count / elapsed:.0f} jobs/s"
    )
    assert len(set(RunRecord.objects.values_list("worker", flat=True))) > 1


def test_sigkill_mid_job__job_is_taken_back_after_its_lease_and_completes():
    job = Job.objects.get(jid=enqueue_job(None, "worker.sleep", {"s": 60, "once": True})["jid"])
    proc = run_workers("--lease", "2000", "--concurrency", "2", "--verbosity", "2", wait=False)
    try:
        started = wait_for(lambda: RunRecord.objects.filter(jid=job.jid).exists())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        _out, err = proc.communicate(timeout=90)
    assert started, err[-3000:]
    job.refresh_from_db()
    assert job.status == JobStatus.PROCESSING
    # Heartbeats stopped with the process: the lease runs out by the database clock.
    assert wait_for(lambda: Job.objects.lease_expired().filter(pk=job.pk).exists())
    proc = run_workers("--burst", "--lease", "2000", "--verbosity", "0")
    assert proc.returncode == 0, proc.stderr[-3000:]
    job.refresh_from_db()
    assert job.status == JobStatus.DONE
    assert job.attempt == 2
    assert "lease expired" in job.errors[0]["message"]
    assert list(RunRecord.objects.values_list("attempt", flat=True)) == [1, 2]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads children from /proc")
def test_sigkill_one_child_at_the_high_throughput_layout__none_lost_held_jobs_spend_no_attempt():
    """SIGKILL one foreman of the high-throughput layout (HIGH_THROUGHPUT_ARGS, done
    rows deleted) while it holds prefetched jobs, with a lease of 5 s: the other
    foreman and the one the supervisor starts in its place reap and run what it held
    (docs/prefetch.md). No job is lost, none is left waiting or running, and the done
    rows are deleted. No attempt is spent by a
    job that did not start: a job whose first recorded run is not attempt 1 is one
    the killed foreman had begun (at most one per slot, 12), and every job it held
    unstarted is among those that run first as attempt 1. Jobs it had begun run
    again (as attempt 2, as test_sigkill_mid_job asserts, or as attempt 1 again when
    a short type's start was not stored yet); no other job runs twice."""
    count = 1_500
    jobs = enqueue_many([{"job_type": "worker.sleep", "payload": {"s": 0.01}}] * count)
    jids = [job.jid for job in jobs]
    with override_settings(JOBQUEUE=HIGH_THROUGHPUT_JOBQUEUE):
        workers = StartedWorkers(
            *HIGH_THROUGHPUT_ARGS,
            "--lease", "5000",
            "--ramp-time", "0",
            "--min-sleep", "5",
            "--max-sleep", "100",
        )  # fmt: skip
    try:
        workers.wait_started()
        assert wait_for(lambda: len(children_of(workers.process.pid)) == 2)
        victim = min(children_of(workers.process.pid))
        its = Job.objects.processing().filter(lease_owner__startswith=f"{gethostname()}:{victim}:")
        assert wait_for(lambda: its.filter(started_at__isnull=True).count() > 24)
        os.kill(victim, signal.SIGKILL)
        assert wait_for(lambda: not alive(victim))
        time.sleep(0.5)  # a statement it had sent (a heartbeat, a claim) has ended
        # Before its lease runs out (the last heartbeat was at most 5/3 s ago).
        held = dict(its.values_list("jid", "started_at"))
        ran = set(RunRecord.objects.filter(jid__in=held).values_list("jid", flat=True))
        assert wait_for(lambda: not Job.objects.exclude(status=JobStatus.DONE).exists())
    finally:
        _code, log = workers.stop()
    assert "foreman process crashed" in log, log[-3000:]
    runs: dict[str, list[int]] = {}
    for jid, attempt in RunRecord.objects.values_list("jid", "attempt"):
        runs.setdefault(jid, []).append(attempt)
    assert set(runs) == set(jids)  # none lost
    # None is left waiting or running, and every done row went: these jobs have
    # nothing that keeps a row (docs/design.md#retention: no result, id, unique key
    # or link), and a batch whose write deadlocked is deleted one job at a time.
    kept = list(Job.objects.values_list("jid", "status", "errors"))
    assert kept == [], (kept, log[-3000:])
    unstarted = {jid for jid, at in held.items() if at is None and jid not in ran}
    assert len(unstarted) > 12, held
    # Attempts go up by one at most from run to run, from 1 unless begun by the victim.
    late = {jid for jid, attempts in runs.items() if sorted(attempts)[0] != 1}
    assert late <= set(held) - unstarted and len(late) <= 12, {jid: runs[jid] for jid in late}
    steps = {jid: a for jid, a in runs.items() if any(y - x > 1 for x, y in pairwise(sorted(a)))}
    assert steps == {}
    twice = {jid: attempts for jid, attempts in runs.items() if len(attempts) > 1}
    assert set(twice) <= set(held), {jid: runs[jid] for jid in set(twice) - set(held)}
    print(  # noqa: T201 (shown with pytest -s)
        f"\n{connection.vendor}: the killed foreman held {len(held)} jobs, {len(unstarted)} "
        f"unstarted; {len(twice)} jobs ran twice, {len(late)} first as attempt 2"
    )


def test_sigterm__running_jobs_finish_or_go_back_none_lost():
    short = [
        enqueue_job(None, "worker.sleep", {"s": 0.3, "label": "short"}, priority=1)["jid"]
        for _ in range(2)
    ]
    long = enqueue_job(None, "worker.sleep", {"s": 60, "once": True, "label": "long"})["jid"]
    proc = run_workers(
        "--concurrency",
        "4",
        "--ramp-time",
        "0",
        "--shutdown-timeout",
        "5000",  # the 0.3 s jobs must finish in it even on a loaded machine
        "--verbosity",
        "1",
        wait=False,
    )
    _out, err = sigterm_when(proc, lambda: RunRecord.objects.count() == 3)
    assert proc.returncode == 0, err[-3000:]
    assert "handed back" in err
    assert set(Job.objects.filter(jid__in=short).values_list("status", flat=True)) == {
        JobStatus.DONE
    }
    handed_back = Job.objects.get(jid=long)
    assert handed_back.status == JobStatus.INIT
    assert handed_back.attempt == 0
    assert handed_back.lease_owner == ""
    # Nothing lost: the next run finishes it.
    assert run_workers("--burst", "--verbosity", "0").returncode == 0
    assert Job.objects.filter(status=JobStatus.DONE).count() == 3


def test_processes__the_final_line_sums_every_childs_outcomes_in_burst_and_on_sigterm():
    for i in range(6):
        enqueue_job(None, "worker.record", {"label": str(i)})
    enqueue_job(None, "worker.fatal", {})
    proc = run_workers("--burst", "--processes", "2", "--verbosity", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runworkers finished: done=6 error=1" in proc.stdout, proc.stdout

    for i in range(4):
        enqueue_job(None, "worker.record", {"label": f"t{i}"})
    proc = run_workers("--processes", "2", "--verbosity", "1", wait=False)
    out, err = sigterm_when(proc, lambda: RunRecord.objects.count() == 11)  # fatal's too
    assert proc.returncode == 0, err[-3000:]
    assert "runworkers finished: done=4" in out, (out, err[-3000:])


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads children from /proc")
@pytest.mark.parametrize("after_s", [0.0, 0.05, 0.2])
def test_processes__a_sigterm_while_the_children_start_stops_them_all(after_s):
    """A child forked with the supervisor's handling, or not yet in its list, must
    not lose the SIGTERM passed on: each child holds it until its foreman handles it.
    (Before the supervisor runs at all, a SIGTERM ends runworkers as any process.)"""
    proc = run_workers("--processes", "2", "--verbosity", "1", wait=False)
    out, err = sigterm_when(proc, lambda: bool(children_of(proc.pid)), after_s=after_s)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert "runworkers finished" in out


def children_of(pid: int) -> set[int]:
    """The foreman processes of the supervisor ``pid`` (Linux /proc): its children
    forked without an exec, so with its own command line, in two looks 50 ms apart.
    A helper a library runs while Django starts (``ldconfig`` for ctypes, say) is a
    child too, and has that command line from its fork to its exec: the second look
    leaves it out (a SIGTERM then would meet runworkers before its supervisor runs)."""
    found = _forked_children(pid)
    if found:
        time.sleep(0.05)
        found &= _forked_children(pid)
    return found


def _forked_children(pid: int) -> set[int]:
    """The children of ``pid`` whose command line is its own, now."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as own:
            cmdline = own.read()
    except OSError:
        return set()
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{entry}/cmdline", "rb") as child:
                    same = child.read() == cmdline
            except OSError:
                continue  # gone meanwhile
            if int(fields[1]) == pid and same:  # the field after the state: the parent
                found.add(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads children from /proc")
def test_processes__children_whose_supervisor_is_killed_drain_and_exit():
    proc = run_workers("--processes", "2", "--verbosity", "1", wait=False)
    children: set[int] = set()
    try:
        assert wait_for(lambda: len(children_of(proc.pid)) == 2)
        children = children_of(proc.pid)
        enqueue_job(None, "worker.record", {"label": "before"})
        assert wait_for(lambda: RunRecord.objects.count() == 1)
        proc.kill()  # SIGKILL: nothing is passed on
        # EOF on its pipes once the children, which share them, have exited too.
        proc.communicate(timeout=90)
        assert wait_for(lambda: not any(alive(child) for child in children), timeout_s=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        for child in children:  # init's children by now, if they outlived it
            if alive(child):
                os.kill(child, signal.SIGKILL)
    assert not Job.objects.processing().exists()


def test_burst__with_nothing_due_exits_zero():
    proc = run_workers("--burst")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no jobs" in proc.stdout


def test_burst__names_the_paused_queues_whose_jobs_it_left_waiting():
    QueuePause.objects.create(queue="reports")
    QueuePause.objects.create(queue="other")  # not asked for: not named
    enqueue_job("reports", "worker.record", {"n": 1})
    proc = run_workers("--burst", "--queues", "reports,emails")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "runworkers finished: no jobs" in proc.stdout
    assert (
        "runworkers: paused, their jobs left waiting: reports (manage.py jobqueue resume reports)"
    ) in proc.stdout
    assert Job.objects.get().waiting
    assert "paused" not in run_workers("--burst", "--queues", "emails").stdout


@pytest.fixture
def check_that_fails():
    """Register a system check of the given tag that reports an error; removed after."""
    registered = []

    def register(tag: str | None) -> None:
        def broken(app_configs, **kwargs):
            return [checks.Error(f"a broken {tag} check", id="tests.E001")]

        checks.register(broken, *([tag] if tag else []))
        registered.append(broken)

    yield register
    for check in registered:
        checks.registry.registry.registered_checks.discard(check)


@pytest.mark.parametrize(
    ("tag", "check_args"),
    [(checks.Tags.urls, []), (checks.Tags.database, ["--database", "default"])],
)
def test_checks__a_failing_url_or_database_check_does_not_stop_a_worker(
    check_that_fails, tag, check_args
):
    # Database checks connect: as under Django's default, only `check --database` runs them.
    check_that_fails(tag)
    with pytest.raises(SystemCheckError, match=f"a broken {tag} check"):
        call_command("check", *check_args)
    call_command("runworkers", "--burst", "-v", "0", skip_checks=False)


@pytest.mark.parametrize("tag", [checks.Tags.models, checks.Tags.compatibility, None])
def test_checks__a_failing_check_of_what_a_worker_uses_stops_it(check_that_fails, tag):
    # None: registered without a tag (as Django's TASKS backend check), which a list of
    # tags never selects: runworkers runs those too.
    check_that_fails(tag)
    with pytest.raises(SystemCheckError, match=f"a broken {tag} check"):
        call_command("runworkers", "--burst", "-v", "0", skip_checks=False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "expected a number from 1 to 10000, got 0"),
        (["--concurrency", "-3"], "expected a number from 1 to 10000, got -3"),
        (["--processes", "0"], "expected a number from 1 to 1000, got 0"),
        (["--lease", "abc"], "expected milliseconds as a whole number, got 'abc'"),
        (["--queues", "a,,b"], "expected comma-separated queue names"),
        (["--prefetch", "-1"], "expected a number from 0 to 10000, got -1"),
        (["--prefetch-ms", "-1"], "expected milliseconds from 0 to 2147483647, got -1"),
        (["--prefetch-ms", "1.5"], "expected milliseconds as a whole number, got '1.5'"),
        # Too large: each made a worker that retried a failing statement for ever
        # (bigint out of range) or died of an OverflowError in a thread's wait.
        (["--concurrency", "99999999999999999999"], "expected a number from 1 to 10000"),
        (["--prefetch", "99999999999999999999"], "expected a number from 0 to 10000"),
        (["--lease", "99999999999999999999"], "expected milliseconds from 0 to 2147483647"),
        (["--break-time", "2147483648"], "expected milliseconds from 0 to 2147483647"),
        (["--ramp-time", "99999999999999999999"], "expected milliseconds from 0 to 2147483647"),
    ],
)
def test_bad_flags__are_rejected(args, message):
    with pytest.raises(CommandError, match=message):
        call_command("runworkers", *args)


def test_flags_at_their_largest__drain_and_exit():
    largest = str(2**31 - 1)
    jids = [job.jid for job in enqueue_many([{"job_type": "worker.record"}] * 50)]
    proc = run_workers(
        "--burst", "-v", "0",
        "--concurrency", "10000",
        "--prefetch", "10000",
        "--prefetch-ms", largest,
        "--lease", largest,
        "--heartbeat", largest,
        "--shutdown-timeout", largest,
        "--max-sleep", largest,
        "--ramp-time", largest,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert Job.objects.filter(jid__in=jids, status=JobStatus.DONE).count() == 50


def test_lease_below_one_second__is_a_command_error():
    with pytest.raises(CommandError, match="--lease must be at least 1000 ms: got 500"):
        call_command("runworkers", "--lease", "500", "--burst")


@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_database_without_the_job_table__is_a_command_error_not_a_loop(processes):
    """``migrate`` not run (README "Quickstart"): the worker used to log a traceback
    per poll, and a ``--burst`` run never ended. The job table is renamed away for the
    test, by real DDL, and back."""
    table = Job._meta.db_table
    with connection.schema_editor() as editor:
        editor.alter_db_table(Job, table, f"{table}_away")
    try:
        with pytest.raises(CommandError, match=r"has no job table .*run `manage.py migrate`"):
            call_command("runworkers", "--burst", "--processes", processes, "-v", "0")
    finally:
        with connection.schema_editor() as editor:
            editor.alter_db_table(Job, f"{table}_away", table)
    assert call_command("runworkers", "--burst", "-v", "0") is None  # starts again


def test_min_sleep_above_max_sleep__is_a_command_error():
    with pytest.raises(CommandError, match="--min-sleep"):
        call_command("runworkers", "--min-sleep", "500", "--max-sleep", "100", "--burst")


# Logging ------------------------------------------------------------------------

#: A line of runworkers' default handler: time, level, [pid], logger name, message.
DEFAULT_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} "
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \[(?P<pid>\d+)\] "
    r"(?P<logger>django_jobqueue(?:\.[\w.]+)?): (?P<message>.+)$"
)
DEFAULT_LOGGING = {"DJANGO_SETTINGS_MODULE": "tests.settings_default_logging"}


def log_lines(stderr: str) -> list[re.Match[str]]:
    return [m for line in stderr.splitlines() if (m := DEFAULT_LINE.match(line))]


def run_burst(*args: str, env: dict[str, str]) -> tuple[int, int, str]:
    """Run ``runworkers --burst *args``; return (exit code, pid, stderr)."""
    proc = run_workers("--burst", *args, env=env, wait=False)
    try:
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, proc.pid, err


def test_default_logging__each_line_has_time_level_pid_and_logger_name():
    """Django's default LOGGING has no handler for django_jobqueue: runworkers adds one."""
    jid = enqueue_job(None, "worker.fatal", {})["jid"]
    code, pid, err = run_burst(env=DEFAULT_LOGGING)
    assert code == 0, err[-3000:]
    lines = log_lines(err)
    started = [m for m in lines if m["message"].startswith("foreman started name=")]
    assert len(started) == 1, err[-3000:]
    assert started[0]["level"] == "INFO"
    assert started[0]["logger"] == "django_jobqueue.worker.foreman"
    assert int(started[0]["pid"]) == pid
    (failed,) = [m for m in lines if m["message"].startswith("job failed")]
    assert failed["level"] == "ERROR"
    assert failed["message"] == (f"job failed jid={jid} type=worker.fatal attempt=1 status=error")
    # The default handler keeps the traceback, under its line.
    assert "NonRetryableError: bad input, do not retry" in err
    # -v 1: no per-claim debug lines.
    assert not [m for m in lines if m["level"] == "DEBUG"]


def test_default_logging__verbosity_2_adds_a_debug_line_per_claim():
    jids = [enqueue_job(None, "worker.record", {"label": str(i)})["jid"] for i in range(2)]
    proc = run_workers("--burst", "--verbosity", "2", env=DEFAULT_LOGGING)
    assert proc.returncode == 0, proc.stderr[-3000:]
    claimed = {
        m["message"].split()[2]: m
        for m in log_lines(proc.stderr)
        if m["message"].startswith("job claimed ")
    }
    assert set(claimed) == {f"jid={jid}" for jid in jids}, proc.stderr[-3000:]
    for match in claimed.values():
        assert match["level"] == "DEBUG"
        assert match["logger"] == "django_jobqueue.worker.foreman"
        assert re.fullmatch(
            r"job claimed jid=\w+ type=worker\.record queue=default attempt=1 worker=\S+",
            match["message"],
        ), match["message"]


def test_default_logging__verbosity_0_shows_warnings_and_errors_only():
    enqueue_job(None, "worker.fatal", {})
    proc = run_workers("--burst", "--verbosity", "0", env=DEFAULT_LOGGING)
    assert proc.returncode == 0, proc.stderr[-3000:]
    levels = {m["level"] for m in log_lines(proc.stderr)}
    assert levels == {"ERROR"}, proc.stderr[-3000:]


def test_default_logging__processes_children_log_in_the_same_format():
    code, pid, err = run_burst("--processes", "2", env=DEFAULT_LOGGING)
    assert code == 0, err[-3000:]
    started = [m for m in log_lines(err) if m["message"].startswith("foreman started name=")]
    pids = {int(m["pid"]) for m in started}
    assert len(started) == 2, err[-3000:]
    assert len(pids) == 2
    assert pid not in pids  # the children's own lines


def test_project_logging__its_own_handler_and_format_win():
    enqueue_job(None, "worker.fatal", {})
    proc = run_workers("--burst", env={"DJANGO_SETTINGS_MODULE": "tests.settings_own_logging"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    prefix = OWN_FORMAT.split("%", 1)[0]
    own = [line for line in proc.stderr.splitlines() if line.startswith(prefix)]
    assert "own-format|INFO|django_jobqueue.worker.foreman|foreman started name=" in (
        "\n".join(own)
    ), proc.stderr[-3000:]
    assert any(
        line.startswith("own-format|ERROR|django_jobqueue.worker.executor|job failed")
        for line in own
    )
    assert log_lines(proc.stderr) == []  # no line in the default format, none twice
