"""The console's batch and workflow pages (docs/console.md "Batches and workflows"),
and their links from a job's page."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

import django_jobqueue as jq
from django_jobqueue import storage
from django_jobqueue.console.flowgraph import STATE_COLOURS, layers
from django_jobqueue.flows.reading import workflow_graph
from django_jobqueue.models import Batch, Job

pytestmark = pytest.mark.django_db


def url(name, *args):
    return reverse(f"django_jobqueue_console:{name}", args=args)


def run_one(**result: object) -> Job:
    (job,) = storage.claim("default", owner="test")
    assert storage.complete(job, result or None)
    return job


def diamond() -> jq.WorkflowResult:
    w = jq.Workflow("diamond <b>")
    w.add("fetch", "flows.step", {"label": "fetch"})
    w.add("left", "flows.step", after=["fetch"])
    w.add("right", "flows.step", after=["fetch"], on_upstream_failure="ignore")
    w.add("merge", "flows.step", after=["left", "right"])
    return w.enqueue()


def nodes(html: str) -> dict[str, str]:
    return dict(
        re.findall(r'<a class="jq-node" href="[^"]+" data-step="([^"]+)" data-state="(\w+)"', html)
    )


@pytest.mark.parametrize("role", ["anonymous", "nonstaff"])
def test_the_pages_need_staff(clients, role):
    result = diamond()
    for page in (url("workflow", result.id), url("batch", 1)):
        response = clients[role].get(page)
        assert response.status_code in (302, 403), page


def test_a_workflow_page_draws_each_step_with_its_state_and_links(clients):
    result = diamond()
    page = clients["staff"].get(url("workflow", result.id))
    assert page.status_code == 200
    html = page.content.decode()
    assert "diamond &lt;b&gt;" in html and "diamond <b>" not in html  # escaped
    assert nodes(html) == {
        "fetch": "waiting",
        "left": "blocked",
        "right": "blocked",
        "merge": "blocked",
    }
    for name, jid in result.items():
        assert f'href="{url("job", jid)}" data-step="{name}"' in html
    assert html.count('<path class="jq-edge jq-edge-pending"') == 4
    assert f'fill="{STATE_COLOURS["blocked"]}"' in html

    run_one()
    html = clients["staff"].get(url("workflow", result.id)).content.decode()
    assert nodes(html) == {
        "fetch": "done",
        "left": "waiting",
        "right": "waiting",
        "merge": "blocked",
    }
    assert html.count('<path class="jq-edge jq-edge-done"') == 2


def test_layers_put_each_step_after_its_deepest_upstream():
    result = diamond()
    steps = workflow_graph(result.id, "default")
    columns = [[steps[i].name for i in column] for column in layers(steps)]
    assert columns == [["fetch"], ["left", "right"], ["merge"]]


def test_a_long_chain_is_laid_out_without_recursion(clients):
    w = jq.Workflow("long").add("s0", "flows.noop")
    for i in range(1, 1500):
        w.add(f"s{i}", "flows.noop", after=[f"s{i - 1}"])
    result = w.enqueue()
    steps = workflow_graph(result.id, "default")
    assert len(layers(steps)) == 1500
    assert clients["staff"].get(url("workflow", result.id)).status_code == 200


def test_a_batch_page_shows_counts_progress_callbacks_and_jobs(clients):
    with jq.batch(on_finish="flows.callback", on_failure="flows.callback") as b:
        jobs = [jq.enqueue_job(None, "flows.noop") for _ in range(3)]
    run_one()
    page = clients["staff"].get(url("batch", b.id))
    assert page.status_code == 200
    html = page.content.decode()
    assert re.search(r'data-count="total">3<', html) and re.search(r'data-count="done">1<', html)
    assert re.search(r'data-count="pending">2<', html)
    assert '<progress id="batch-progress" max="3" value="1"' in html
    for job in jobs:
        assert url("job", job.jid) in html
    assert html.count("not made yet") == 2

    run_one()
    run_one()
    html = clients["staff"].get(url("batch", b.id)).content.decode()
    finish = Batch.objects.get(pk=b.id).finish_jid
    assert finish and url("job", finish) in html
    assert 'data-kind="on_failure"' in html and html.count("not made yet") == 1
    assert "finished" in html
    assert f'/admin/django_jobqueue/job/?batch={b.id}"' in html


def test_a_jobs_page_links_its_batch_and_workflow(clients):
    result = diamond()
    with jq.batch() as b:
        in_batch = jq.enqueue_job(None, "flows.noop")
    html = clients["staff"].get(url("job", result["left"])).content.decode()
    assert f'href="{url("workflow", result.id)}"' in html and "step left" in html
    html = clients["staff"].get(url("job", in_batch.jid)).content.decode()
    assert f'href="{url("batch", b.id)}"' in html
    plain = jq.enqueue_job(None, "flows.noop")
    assert 'id="batch-link"' not in clients["staff"].get(url("job", plain.jid)).content.decode()


def test_unknown_ids_are_404(clients):
    for page in (url("batch", 999999), url("workflow", 999999), f"/console/batches/{2**70}/"):
        assert clients["staff"].get(page).status_code == 404, page
