"""Each operator action taken in a real browser, in the console and in the admin, is one
row of the console's audit log, read there: retry, cancel, delete, pause, resume, a
limit set and cleared, a cron plan edited and deleted, a gateway token made and revoked
(docs/console.md "Audit log"). Playwright over Debian's chromium, as in
tests/console/test_browser.py. The CLI's and the gateway's rows are read in
tests/test_audit.py and tests/gateway/test_audit.py.
"""

from __future__ import annotations

from django_jobqueue import schedules
from django_jobqueue.models import ApiToken, AuditEntry, Job, JobStatus, ScheduleJob
from django_jobqueue.store import limits
from django_jobqueue.store.audit import Actor
from tests.maintenance_helpers import make_job
from tests.testapp.jobtypes.schedules import tick  # noqa: F401  (registers schedules.*)

from .test_browser import browser, pytestmark, shot  # noqa: F401  (fixture, marks)
from .test_browser_search import login


def submitted(page, selector: str) -> str:
    """Click ``selector``, wait for the page it leads to; return its messages."""
    page.click(selector)
    page.wait_for_load_state()
    return page.locator(".messagelist").inner_text()


def test_each_action_is_one_row_of_the_audit_log(live_server, browser):  # noqa: F811
    limits.clear_cache()
    waiting = make_job(queue="mail", status=JobStatus.INIT)
    dead = make_job(queue="mail", status=JobStatus.MAX_RETRY)
    done = make_job(queue="mail", status=JobStatus.DONE)
    schedules.create_cron_plan(
        "default", "nightly", "schedules.tick", cron="0 3 * * *", tz_name="UTC",
        actor=Actor("cli", "setup"),
    )  # fmt: skip
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, live_server)
    console = f"{live_server.url}/console"

    page.goto(f"{console}/jobs/{dead.jid}/")
    assert "Retried 1 dead job." in submitted(page, "#retry")
    page.goto(f"{console}/jobs/{waiting.jid}/")
    assert "ancel" in submitted(page, "#cancel")
    page.goto(f"{console}/jobs/{done.jid}/")
    submitted(page, "#delete")
    assert not Job.objects.filter(pk=done.pk).exists()

    page.goto(f"{console}/")
    page.fill("#pause-queue-name", "mail")
    assert "Paused queue mail." in submitted(page, "#pause-queue button")
    submitted(page, "#queues tr[data-queue=mail] button")  # now "Resume"

    page.goto(f"{console}/limits/")
    page.fill("#limit-target", "type:schedules.tick")
    page.fill("#limit-concurrency", "3")
    assert "concurrency 3" in submitted(page, "#limit-submit")
    assert "cleared" in submitted(page, "#limits tr[data-target='type:schedules.tick'] button")

    page.goto(f"{console}/schedule/nightly")
    page.fill("#id_cron", "*/20 * * * *")
    assert "Saved schedule nightly: cron changed." in submitted(page, "#save")
    page.once("dialog", lambda dialog: dialog.accept())
    assert "Deleted schedule nightly" in submitted(page, "#delete-plan button")
    assert not ScheduleJob.objects.exists()

    page.goto(f"{live_server.url}/admin/django_jobqueue/apitoken/add/")
    page.fill("#id_name", "deploy-bot")
    page.fill("#id_queues_text", "mail")
    page.check("input[name=scope_choices][value=produce]")
    assert "copy it now" in submitted(page, "input[name=_save]")
    page.check(f"input[name=_selected_action][value='{ApiToken.objects.get().pk}']")
    page.select_option("select[name=action]", "revoke")
    assert "Revoked 1 token(s)." in submitted(page, "button[name=index]")

    page.goto(f"{console}/audit/")
    shot(page, "audit-each-action")
    rows = page.locator("#audit tbody tr")
    shown = []
    for index in range(rows.count()):
        cells = rows.nth(index).locator("td").all_inner_texts()
        _when, source, who, action, what, count = cells[:6]
        shown.append((source, who, action, what, count))
    assert shown == [
        ("admin", "ops", "token_revoke", "tokens deploy-bot", "1"),
        ("admin", "ops", "token_create", "token deploy-bot", "1"),
        ("console", "ops", "delete", "schedule nightly: */20 * * * *", "1"),
        ("console", "ops", "edit", "schedule nightly: cron '0 3 * * *' -> '*/20 * * * *'", "1"),
        ("console", "ops", "limit_clear", "type:schedules.tick", "1"),
        ("console", "ops", "limit_set", "type:schedules.tick", "1"),
        ("console", "ops", "resume", "queue mail", "1"),
        ("console", "ops", "pause", "queue mail", "1"),
        ("console", "ops", "delete", f"job {done.jid}", "1"),
        ("console", "ops", "cancel", f"job {waiting.jid}", "1"),
        ("console", "ops", "retry", f"job {dead.jid}", "1"),
        ("cli", "setup", "create", shown[-1][3], "1"),
    ]
    assert shown[-1][3].startswith("schedule nightly")
    # The page shows the table's rows, every one of them.
    assert AuditEntry.objects.count() == len(shown)
    # A row on one job links to the job's page.
    link = page.locator("#audit tbody tr[data-action=retry] a")
    assert link.get_attribute("href") == f"/console/jobs/{dead.jid}/"
