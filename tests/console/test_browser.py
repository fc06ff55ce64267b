"""A real browser over the console: Playwright driving Debian's chromium.

Playwright never downloads a browser here: it launches /usr/bin/chromium, which
scripts/test installs with apt when it is missing. Screenshots of every page go to
.artifacts/ (git-ignored). A real ``runworkers`` process serves the queue of the dead
letter the test retries, so the retried job is seen to run to done.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store.licence import generate_key_pair, issue_licence
from django_jobqueue.store.workerstats import StatsBuffer, register_worker
from tests.maintenance_helpers import make_job, make_jobs
from tests.testapp.models import RunRecord
from tests.workers_helpers import StartedWorkers

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
RETRY_QUEUE = "console-retry"

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.path.exists(CHROMIUM), reason="needs Debian's chromium at /usr/bin/chromium"
    ),
]


@pytest.fixture
def browser():
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    # pytest-django's live_server and Playwright's sync API both want the main thread;
    # Django's async-unsafe guard would refuse the ORM under Playwright's event loop.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield instance
        instance.close()
    os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)


def shot(page, name, attempts=3):
    """Save a full-page screenshot of ``page`` to ``.artifacts/console-{name}.png``.

    Chromium now and then refuses one capture with "Unable to capture screenshot" on a
    loaded machine and takes the same picture when asked again, so that one refusal is
    asked again up to ``attempts`` times, 0.5 s apart; any other error, or the refusal
    every time, is raised.
    """
    from playwright.sync_api import Error as PlaywrightError

    ARTIFACTS.mkdir(exist_ok=True)
    for attempt in range(1, attempts + 1):
        try:
            page.screenshot(path=str(ARTIFACTS / f"console-{name}.png"), full_page=True)
            return
        except PlaywrightError as error:
            if "Unable to capture screenshot" not in str(error) or attempt == attempts:
                raise
            time.sleep(0.5)


def seed():
    now = datetime.now(UTC).timestamp()
    for minutes_ago in range(0, 60, 3):
        buffer = StatsBuffer(clock=lambda m=minutes_ago: now - 60 * m)
        for n in range(5 + minutes_ago % 7):
            buffer.record("emails", "emails.send", "done", 40 * n)
        if minutes_ago % 9 == 0:
            buffer.record("emails", "emails.send", "failed", 900)
        buffer.flush("default")
    for hours_ago in range(1, 24, 2):
        buffer = StatsBuffer(clock=lambda h=hours_ago: now - 3600 * h)
        for _ in range(20 + hours_ago):
            buffer.record("reports", "reports.build", "done", 2_000)
        buffer.flush("default")
    make_jobs(12, queue="emails", job_type="emails.send")
    make_jobs(
        3, queue="reports", job_type="reports.build", run_at=datetime.now(UTC) + timedelta(hours=1)
    )
    register_worker(
        "default", "web-1:4242", host="web-1", pid=4242, concurrency=4, queues=["emails"]
    )
    # The dead letter the test retries: a job type the tests' workers run
    # (worker.record), on a queue of its own that only the test's worker serves.
    return make_job(
        queue=RETRY_QUEUE,
        job_type="worker.record",
        status=JobStatus.MAX_RETRY,
        attempt=4,
        message="SMTPError: relay refused",  # as storage.fail stores the last failure
        payload={"to": "<script>alert('x')</script>"},
        errors=[
            {
                "attempt": 4,
                "exception_class": "SMTPError",
                "message": "relay refused",
                "traceback": "Traceback (most recent call last):\n  ...\nSMTPError: relay refused",
                "at": datetime.now(UTC).isoformat(),
            }
        ],
    )


@pytest.fixture
def worker(live_server):
    """A real ``runworkers`` on the live server's database, serving RETRY_QUEUE only."""
    started = StartedWorkers(
        "--queues", RETRY_QUEUE,
        "--concurrency", "1",
        "--min-sleep", "5",
        "--max-sleep", "100",
        "--ramp-time", "0",
    )  # fmt: skip
    try:
        started.wait_started()
        yield started
    finally:
        code, stderr = started.stop()
        assert code == 0, stderr[-3000:]


def status_until(page, url, wanted, timeout_s=60.0):
    """Reload the job page ``url`` until its status reads ``wanted``; return the text."""
    deadline = time.monotonic() + timeout_s
    while True:
        page.goto(url)
        text = page.locator("#status").inner_text()
        if text.startswith(wanted) or time.monotonic() > deadline:
            return text
        time.sleep(0.2)


def test_console_in_a_real_browser(live_server, browser, worker):
    dead = seed()
    User.objects.create_superuser("ops", password="console-test-pw")  # noqa: S106
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(f"{live_server.url}/console/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "console-test-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/console/")
    assert page.locator("#chart-minute svg rect.jq-done").count() >= 15
    assert page.locator("#chart-hour svg rect.jq-done").count() >= 10
    assert page.locator("#queues tr[data-queue=emails] td").nth(1).inner_text() == "12"
    # The job columns are the state words (docs/console.md#states).
    headers = page.locator("#queues thead th").all_text_contents()  # before CSS case
    assert headers[1:5] == ["Waiting", "Scheduled", "Running", "Failed"]
    shot(page, "overview")

    page.goto(f"{live_server.url}/console/jobs/?state=failed")
    assert page.locator("#jobs tbody tr").count() == 1
    assert "relay refused" in page.locator("#jobs tbody tr").inner_text()  # the error column
    shot(page, "jobs")
    # Keyboard: "/" focuses the filter, "j" selects the first row, Enter opens it.
    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.closest('form#filters') !== null")
    page.keyboard.press("Escape")
    page.evaluate("document.activeElement.blur()")
    page.keyboard.press("?")
    assert page.locator("#jq-help").is_visible()
    page.keyboard.press("?")
    assert not page.locator("#jq-help").is_visible()
    page.keyboard.press("j")
    assert page.locator("#jobs tbody tr.jq-current").count() == 1
    page.keyboard.press("Enter")
    page.wait_for_url(f"**/console/jobs/{dead.jid}/")
    assert "<script>alert('x')</script>" in page.locator("#payload").inner_text()
    assert dialogs == []  # the payload's script never ran
    shot(page, "job")
    assert not RunRecord.objects.filter(jid=dead.jid).exists()
    assert page.locator("#status").inner_text() == "failed (max_retry)"
    assert page.locator("#cancel").count() == 0  # not offered on a dead job
    page.click("#retry")
    page.wait_for_load_state()
    assert "Retried 1 dead job." in page.locator(".messagelist").inner_text()
    # Back in the queue, and the running worker takes it at once: the page may show
    # any step of the run, and its last one is done.
    assert page.locator("#status").inner_text().split()[0] in ("waiting", "running", "done")
    job_url = f"{live_server.url}/console/jobs/{dead.jid}/"
    assert status_until(page, job_url, "done") == "done"
    assert RunRecord.objects.filter(jid=dead.jid, attempt=1).count() == 1  # it ran, once, anew
    assert Job.objects.get(pk=dead.pk).status == JobStatus.DONE
    shot(page, "job-retried-done")
    assert page.locator("#retry").count() == page.locator("#cancel").count() == 0  # done
    events = page.locator("#timeline li .jq-what").all_inner_texts()
    assert events[-3:] == ["retry by console ops", "attempt 1 started", "finished: done"]
    assert "attempt 0 started" not in events
    assert "on host" in page.locator("#claimed").inner_text()  # run by the test's worker

    page.goto(f"{live_server.url}/console/")
    page.locator("#queues tr[data-queue=emails] button").click()
    page.wait_for_load_state()
    assert "paused" in page.locator("#queues tr[data-queue=emails]").inner_text()
    page.fill("#pause-queue-name", "quiet")  # a queue with no job at all
    page.locator("#pause-queue button").click()
    page.wait_for_load_state()
    assert "Paused queue quiet." in page.locator(".messagelist").inner_text()
    assert "paused" in page.locator("#queues tr[data-queue=quiet]").inner_text()

    # The audit log: newest first, the pauses and the retry done above, by "ops".
    page.goto(f"{live_server.url}/console/audit/")
    audit_rows = page.locator("#audit tbody tr")
    assert audit_rows.nth(0).get_attribute("data-action") == "pause"
    assert "queue quiet" in audit_rows.nth(0).inner_text()
    assert "queue emails" in audit_rows.nth(1).inner_text()
    retry_row = page.locator("#audit tbody tr[data-action=retry]")
    assert retry_row.count() == 1
    assert "ops" in retry_row.inner_text() and "console" in retry_row.inner_text()
    assert f"job {dead.jid}" in retry_row.inner_text()
    shot(page, "audit")
    page.keyboard.press("j")
    page.keyboard.press("j")
    assert page.locator("#audit tbody tr.jq-current").inner_text() == audit_rows.nth(1).inner_text()
    page.keyboard.press("k")
    assert "queue quiet" in page.locator("#audit tbody tr.jq-current").inner_text()
    page.evaluate("window.jqMarker = 1")
    page.keyboard.press("r")  # refresh: a new page, the marker gone
    page.wait_for_load_state()
    page.wait_for_function("window.jqMarker === undefined")

    page.goto(f"{live_server.url}/console/workers/")
    live = page.locator("#live").inner_text()
    assert "web-1:4242" in live
    assert RETRY_QUEUE in live  # the test's runworkers, from the registry
    shot(page, "workers")
    page.goto(f"{live_server.url}/console/schedules/")
    shot(page, "schedules")

    response = page.goto(f"{live_server.url}/console/pro/locks/")
    assert response.status == 404
    assert "Unique locks is a Pro feature" in page.locator("#pro-required").inner_text()
    assert page.locator("#licence-docs").get_attribute("href")
    shot(page, "pro-required")
    private_pem, public_pem = generate_key_pair()
    token = issue_licence(
        private_pem, licensee="Browser", expires_at=datetime.now(UTC) + timedelta(days=1)
    )
    with override_settings(JOBQUEUE={"LICENCE_KEY": token, "LICENCE_PUBLIC_KEYS": [public_pem]}):
        make_job(queue="emails", unique_key="digest:42", unique_mode="until_executed")
        response = page.goto(f"{live_server.url}/console/pro/locks/")
        assert response.status == 200
        assert "digest:42" in page.locator("#locks").inner_text()
        shot(page, "pro-locks")
