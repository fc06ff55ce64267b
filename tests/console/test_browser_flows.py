"""The workflow and batch pages in a real browser (docs/console.md "Batches and
workflows"): a 5-step workflow's graph shows each step's state as a real
``runworkers`` runs it, a failed step is retried from the console, and the workflow
resumes to done. Playwright on Debian's chromium, as tests/console/test_browser.py.
"""

from __future__ import annotations

import time

import pytest
from django.contrib.auth.models import User

import django_jobqueue as jq
from django_jobqueue.models import Job, JobStatus, Workflow
from tests.console.test_browser import browser, shot  # noqa: F401 - the fixture
from tests.console.test_browser import pytestmark as browser_marks
from tests.testapp.models import RunRecord
from tests.workers_helpers import StartedWorkers

QUEUE = "console-flow"
pytestmark = browser_marks


@pytest.fixture
def flow_worker(live_server):
    """A real ``runworkers`` on the live server's database, serving QUEUE only."""
    started = StartedWorkers(
        "--queues", QUEUE,
        "--concurrency", "2",
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


def graph_states(page) -> dict[str, str]:
    nodes = page.locator("#graph svg a.jq-node")
    return {
        nodes.nth(i).get_attribute("data-step"): nodes.nth(i).get_attribute("data-state")
        for i in range(nodes.count())
    }


def states_until(page, url, wanted, timeout_s=60.0):
    """Reload the workflow page until its graph shows ``wanted``; return what it shows."""
    deadline = time.monotonic() + timeout_s
    while True:
        page.goto(url)
        states = graph_states(page)
        if states == wanted or time.monotonic() > deadline:
            return states
        time.sleep(0.2)


def test_a_workflow_graph_and_a_retried_step_resuming_it(live_server, browser, flow_worker):  # noqa: F811
    User.objects.create_superuser("ops", password="console-test-pw")  # noqa: S106
    w = jq.Workflow("images")
    w.add("fetch", "flows.step", {"label": "fetch"}, queue=QUEUE)
    for name in ("thumb", "exif"):
        w.add(name, "flows.step", {"label": name}, after=["fetch"], queue=QUEUE)
    w.add("upload", "flows.flaky", {"label": "upload"}, after=["fetch"], queue=QUEUE)
    w.add("merge", "flows.step", {"label": "merge"}, after=["thumb", "exif", "upload"], queue=QUEUE)
    with jq.batch() as b:
        result = w.enqueue()

    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{live_server.url}/console/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "console-test-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{live_server.url}/console/")

    # The first run: upload dies (its first run always fails), so merge, which waits
    # for it under the default policy, ends cancelled without running.
    flow_url = f"{live_server.url}/console/workflows/{result.id}/"
    failed = {
        "fetch": "done",
        "thumb": "done",
        "exif": "done",
        "upload": "failed",
        "merge": "cancelled",
    }
    assert states_until(page, flow_url, failed) == failed
    assert page.locator("#graph svg a.jq-node").count() == 5
    assert page.locator("#graph svg path.jq-edge").count() == 6
    assert page.locator("#graph svg path.jq-edge-failed").count() == 1  # upload -> merge
    assert "cancelled" in page.locator("#steps tr[data-step=merge]").inner_text()
    assert not RunRecord.objects.filter(label="merge").exists()
    shot(page, "workflow-failed")

    # A node links to its job; the job's page links back, and retries it.
    page.locator('#graph svg a.jq-node[data-step="upload"]').click()
    page.wait_for_url(f"**/console/jobs/{result['upload']}/")
    assert page.locator("#status").inner_text() == "failed (error)"
    assert page.locator("#workflow-link").inner_text() == f"workflow {result.id}, step upload"
    assert page.locator("#batch-link").inner_text() == f"batch {b.id}"
    page.click("#retry")
    page.wait_for_load_state()
    assert "Retried 1 dead job." in page.locator(".messagelist").inner_text()

    # The retried step runs again and succeeds; merge, blocked again, then runs.
    page.locator("#workflow-link a").click()
    page.wait_for_url(f"**/console/workflows/{result.id}/")
    done = dict.fromkeys(failed, "done")
    assert states_until(page, flow_url, done) == done
    assert "finished" in page.locator("#workflow-state").inner_text()
    shot(page, "workflow-done")
    assert list(RunRecord.objects.filter(label="merge").values_list("jid", flat=True)) == [
        result["merge"]
    ]
    assert Job.objects.get(jid=result["merge"]).status == JobStatus.DONE
    row = Workflow.objects.get(pk=result.id)
    assert (row.done, row.failed, row.cancelled, row.finished_at is not None) == (5, 0, 0, True)

    # The batch page: every job ended, each listed with a link.
    page.goto(f"{live_server.url}/console/batches/{b.id}/")
    assert page.locator('#batch-counts [data-count="done"]').inner_text() == "5"
    assert page.locator("#batch-progress").get_attribute("value") == "5"
    assert page.locator("#jobs tbody tr").count() == 5
    shot(page, "batch")
    page.close()
