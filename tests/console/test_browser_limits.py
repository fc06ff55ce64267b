"""Set a flow-control limit in the console of a real browser and watch in-flight hold
at it while a real ``runworkers`` drains; a throttled job's page says why it waits
(docs/limits.md "Visibility"). Playwright over Debian's chromium."""

from __future__ import annotations

import time
from typing import Any

import pytest

from django_jobqueue import enqueue_many
from django_jobqueue.models import Job, JobStatus, LimitOverride
from django_jobqueue.store import limits
from tests.testapp.models import RunRecord
from tests.workers_helpers import StartedWorkers

from .test_browser import ARGS, CHROMIUM, browser, shot  # noqa: F401
from .test_browser_search import login

pytestmark = pytest.mark.django_db(transaction=True)


def _open(page: Any, url: str) -> None:
    """Go to ``url``. The limits page refreshes itself (a meta refresh): on a busy
    machine that refresh can start while this navigation does and abort it
    (``net::ERR_ABORTED``, or "interrupted by another navigation" when the refresh
    wins), so an aborted navigation is tried again, twice at most."""
    for attempt in range(3):
        try:
            page.goto(url)
            return
        except Exception as error:  # playwright's Error; playwright is imported lazily
            aborted = "ERR_ABORTED" in str(error) or "interrupted by another navigation" in str(
                error
            )
            if not aborted or attempt == 2:
                raise


def test_set_a_limit_in_the_console_and_watch_in_flight_hold_at_it(live_server, browser):  # noqa: F811
    limits.clear_cache()
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    login(page, live_server)
    page.goto(f"{live_server.url}/console/limits/")
    assert "No limits." in page.locator("#limits").inner_text()
    page.fill("#limit-target", "type:limits.run")
    page.fill("#limit-concurrency", "2")
    page.click("#limit-submit")
    page.wait_for_url(f"{live_server.url}/console/limits/")
    assert "Limit of type:limits.run set: concurrency 2." in page.content()
    assert LimitOverride.objects.get().concurrency == 2
    jobs = enqueue_many([{"queue": "lim", "job_type": "limits.run", "payload": {"s": 0.4}}] * 12)
    workers = StartedWorkers(
        "--queues", "lim", "--concurrency", "4", "--min-sleep", "5", "--max-sleep", "100",
        "--ramp-time", "0",
    )  # fmt: skip
    seen: list[str] = []
    try:
        workers.wait_started()
        deadline = time.monotonic() + 120
        while RunRecord.objects.count() < 12 and time.monotonic() < deadline:
            _open(page, f"{live_server.url}/console/limits/")
            cell = page.locator("#limits tr[data-target='type:limits.run'] .jq-in-flight")
            seen.append(cell.inner_text())
            if seen[-1] == "2 / 2" and len(seen) < 50:
                shot(page, "limits")
                waiting = Job.objects.filter(waiting=True).first()
                if waiting is not None:
                    page.goto(f"{live_server.url}/console/jobs/{waiting.jid}/")
                    if page.locator("#why-waiting").count():  # not claimed meanwhile
                        why = page.locator("#why-waiting").inner_text()
                        assert "Throttled by limit type:limits.run" in why or "worker" in why
            time.sleep(0.1)
    finally:
        code, stderr = workers.stop()
    assert code == 0, stderr[-3000:]
    assert RunRecord.objects.count() == 12
    assert {job["jid"] for job in jobs} == set(RunRecord.objects.values_list("jid", flat=True))
    counts = [int(text.split(" / ")[0]) for text in seen]
    assert max(counts) == 2  # reached, never passed
    assert Job.objects.filter(status=JobStatus.DONE).count() == 12
