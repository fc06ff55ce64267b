"""The audit log (docs/console.md "Audit log"): the CLI's actions write one row each,
in the transaction of the action; rows past AUDIT_KEEP are pruned; a bad AUDIT_KEEP
is a system-check error."""

from __future__ import annotations

import getpass
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import override_settings
from django.utils import timezone

from django_jobqueue.checks import check_settings
from django_jobqueue.models import ApiToken, AuditEntry, Job, JobStatus, QueuePause, ScheduleJob
from django_jobqueue.store import audit, locks
from tests.maintenance_helpers import make_job

pytestmark = pytest.mark.django_db


def jobqueue(*args: Any) -> str:
    out = StringIO()
    call_command("jobqueue", *args, stdout=out)
    return out.getvalue()


def rows() -> list[tuple[str, str, str, int]]:
    return list(
        AuditEntry.objects.order_by("pk").values_list("source", "action", "target", "count")
    )


def test_cli_actions__write_one_row_each():
    dead = make_job(status=JobStatus.MAX_RETRY, queue="mail")
    waiting = make_job(status=JobStatus.INIT, queue="mail")
    ScheduleJob.objects.create(
        name="nightly", queue="default", job_type="maint.noop", cron="0 3 * * *"
    )

    assert jobqueue("retry", "--jid", dead.jid) == "Retried 1 dead job; it is due now.\n"
    assert "Cancelled 1 waiting job(s)" in jobqueue("cancel", "--jid", waiting.jid)
    jobqueue("pause", "mail")
    jobqueue("resume", "mail")
    jobqueue("schedules", "--disable", "nightly")
    jobqueue("token", "create", "--name", "ci")
    jobqueue("token", "revoke", "ci")
    jobqueue("prune")

    assert rows() == [
        ("cli", "retry", f"job {dead.jid}", 1),
        ("cli", "cancel", f"job {waiting.jid}", 1),
        ("cli", "pause", "queue mail", 1),
        ("cli", "resume", "queue mail", 1),
        ("cli", "disable", "schedules nightly", 1),
        ("cli", "token_create", "token ci", 1),
        ("cli", "token_revoke", "token ci", 1),
        ("cli", "prune", "finished jobs", 0),
    ]
    assert set(AuditEntry.objects.values_list("actor", flat=True)) == {getpass.getuser()}
    assert AuditEntry.objects.get(action="retry").jids == dead.jid
    assert not QueuePause.objects.exists()
    assert ApiToken.objects.get().revoked


def test_cli_cancel__needs_a_choice_and_known_jids():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="give --jid or --queue"):
        jobqueue("cancel")
    with pytest.raises(CommandError, match="No job has jid nope"):
        jobqueue("cancel", "--jid", "nope")
    assert not AuditEntry.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_audit_row__rolls_back_with_its_action():
    job = make_job(status=JobStatus.MAX_RETRY)
    actor = audit.Actor("cli", "ops")

    def retry_then_fail() -> None:
        Job.objects.filter(pk=job.pk).update(status=JobStatus.INIT, waiting=True)
        raise RuntimeError("the action failed after its first write")

    with pytest.raises(RuntimeError):
        audit.run_audited("default", retry_then_fail, actor, "retry", target="job x")
    assert Job.objects.get(pk=job.pk).status == JobStatus.MAX_RETRY
    assert not AuditEntry.objects.exists()

    with pytest.raises(RuntimeError), locks.write_transaction("default"):
        audit.record("default", actor, "retry", target="job x", count=1)
        raise RuntimeError("the caller's transaction rolled back")
    assert not AuditEntry.objects.exists()


def test_prune__deletes_rows_past_audit_keep():
    old = audit.record("default", audit.Actor("cli", "ops"), "pause", target="queue a")
    AuditEntry.objects.filter(pk=old.pk).update(at=timezone.now() - timedelta(days=91))
    recent = audit.record("default", audit.Actor("cli", "ops"), "pause", target="queue b")
    out = jobqueue("prune")
    assert "Deleted 1 audit log row(s) older than JOBQUEUE['AUDIT_KEEP']." in out
    assert list(AuditEntry.objects.filter(action="pause").values_list("pk", flat=True)) == [
        recent.pk
    ]
    with override_settings(JOBQUEUE={"AUDIT_KEEP": "2h"}):
        AuditEntry.objects.filter(pk=recent.pk).update(at=timezone.now() - timedelta(hours=3))
        assert audit.prune_audit("default") == 1


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("soon", "JOBQUEUE['AUDIT_KEEP']"),
        ("-1d", "JOBQUEUE['AUDIT_KEEP']"),
        ("10m", "at least an hour"),
        (True, "not a boolean"),
    ],
)
def test_audit_keep__a_bad_value_is_a_check_error(value, problem):
    with override_settings(JOBQUEUE={"AUDIT_KEEP": value}):
        errors = check_settings()
    assert [e.id for e in errors] == ["django_jobqueue.E001"]
    assert problem in errors[0].msg


def test_record__refuses_an_unknown_source():
    with pytest.raises(ValueError, match="must be one of"):
        audit.record("default", audit.Actor("cron", "x"), "pause")
