"""Search by a payload field, bulk-retry every match (Pro) and watch them run, and a
running job's progress bar move without a reload: Playwright over Debian's chromium
(docs/console.md "Search syntax" and "Progress")."""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User

from django_jobqueue.models import AuditEntry, Job, JobStatus
from tests.maintenance_helpers import make_job, running
from tests.testapp.models import RunRecord

from .test_browser import ARGS, CHROMIUM, RETRY_QUEUE, browser, shot, worker  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def login(page, live_server) -> None:
    User.objects.create_superuser("ops", password="console-test-pw")  # noqa: S106
    page.goto(f"{live_server.url}/console/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "console-test-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/console/")


def dead(customer_id: int) -> Job:
    return make_job(
        queue=RETRY_QUEUE,
        job_type="worker.record",
        status=JobStatus.MAX_RETRY,
        attempt=4,
        payload={"customer_id": customer_id},
    )


def test_search_by_payload_then_bulk_retry_every_match(live_server, browser, worker, pro):  # noqa: F811
    wanted = [dead(42) for _ in range(3)]
    other = dead(7)
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, live_server)

    page.goto(f"{live_server.url}/console/jobs/")
    page.fill("#id_q", "colour:red")
    page.click("#filters button[type=submit]")
    assert "colour:red" in page.locator("#filters").inner_text()  # the bad term, named

    page.fill("#id_q", "payload.customer_id:42")
    page.click("#filters button[type=submit]")
    page.wait_for_load_state()
    rows = page.locator("#jobs tbody tr")
    assert rows.count() == 3
    assert {job.jid for job in wanted} == {
        rows.nth(i).locator("td").nth(1).inner_text() for i in range(3)
    }
    shot(page, "search-payload")

    page.click("text=Act on every match (Pro)")
    page.wait_for_load_state()
    assert page.locator("#id_q").input_value() == "payload.customer_id:42"
    page.select_option("select[name=action]", "retry")
    page.click("button:has-text('Count')")
    page.wait_for_load_state()
    page.click("#confirm")
    page.wait_for_load_state()

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if Job.objects.filter(pk__in=[j.pk for j in wanted], status=JobStatus.DONE).count() == 3:
            break
        time.sleep(0.2)
    assert RunRecord.objects.filter(jid__in=[j.jid for j in wanted], attempt=1).count() == 3
    assert Job.objects.get(pk=other.pk).status == JobStatus.MAX_RETRY
    (row,) = AuditEntry.objects.filter(action="retry")
    assert (row.source, row.count) == ("console", 3)
    page.goto(f"{live_server.url}/console/jobs/{wanted[0].jid}/")
    assert page.locator("#status").inner_text() == "done"


def test_progress_bar_moves_without_a_reload(live_server, browser):  # noqa: F811
    job = running(queue="reports", job_type="reports.build")
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, live_server)
    page.goto(f"{live_server.url}/console/jobs/{job.jid}/")
    page.evaluate("window.jqLoaded = true")  # gone if the page reloads
    bar = page.locator(f'#progress [data-jq-progress="{job.jid}"] progress')
    assert bar.count() == 1

    for done in (10, 55):
        Job._base_manager.filter(pk=job.pk).update(
            progress={"done": done, "total": 100, "message": f"page {done}"}
        )
        page.wait_for_function(
            f"document.querySelector('#progress progress').value === {done}", timeout=10_000
        )
        assert f"page {done}" in page.locator("#progress").inner_text()
    shot(page, "progress")

    page.goto(f"{live_server.url}/console/jobs/?state=running")
    page.evaluate("window.jqLoaded = true")
    list_bar = page.locator(f'#jobs [data-jq-progress="{job.jid}"] progress')
    assert list_bar.get_attribute("value") == "55"
    Job._base_manager.filter(pk=job.pk).update(progress={"done": 80, "total": 100, "message": None})
    page.wait_for_function(
        f"document.querySelector('#jobs [data-jq-progress=\"{job.jid}\"] progress').value === 80",
        timeout=10_000,
    )
    Job._base_manager.filter(pk=job.pk).update(status=JobStatus.DONE, finished_at=job.started_at)
    page.wait_for_function(
        "document.querySelector('#jobs .jq-progress-text').textContent === 'done'",
        timeout=10_000,
    )
    assert page.evaluate("window.jqLoaded") is True  # never reloaded
