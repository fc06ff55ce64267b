"""The clients' conformance suite (clients/conformance/README.md), run by every language
with a ``clients/<lang>/conformance`` runner against live gateways on the test database.

For each language: build it once, run each scenario directory in one process against
its gateway, require ``ok`` for every scenario by name, then check what was stored;
then run its ``conformance worker`` on a queue of echo jobs and one ``spawn`` job (an
enqueue from inside a handler) and stop it with SIGTERM. A route of /sdk/openapi.json
that no scenario's verb calls fails ``test_every_route_has_a_scenario``.

Only scripts/test's ``clients`` leg runs these (``JOBQUEUE_TEST_CLIENTS=1``): it
installs the toolchains; a language whose runner does not build fails, never skips.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator

import httpx
import pytest
from django.db.models import Q

from django_jobqueue.client import Client
from django_jobqueue.models import Job, JobStatus, Worker

from . import conformance as cf
from .live import live_gateway

#: A skip mark, not a skip in a fixture: the module's gateways are not even started in
#: the other legs.
pytestmark = [
    pytest.mark.clients,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.environ.get("JOBQUEUE_TEST_CLIENTS"),
        reason="the clients' conformance runs in scripts/test's clients leg only",
    ),
]

#: Verbs (README "Verbs and their answers") to the OpenAPI operationId each calls.
VERB_OPERATIONS = {
    "enqueue": "enqueue",
    "enqueue_batch": "enqueue_batch",
    "get_job": "get_job",
    "cancel": "cancel_job",
    "retry": "retry_job",
    "ids.add": "id_add",
    "ids.set": "id_set",
    "ids.update": "id_update",
    "ids.cancel": "id_cancel",
    "ids.get": "id_get",
    "ids.list": "list_jobs",
    "register": "worker_register",
    "claim": "worker_claim",
    "heartbeat": "worker_heartbeat",
    "complete": "worker_complete",
    "fail": "worker_fail",
    "stop_worker": "worker_stop",
}
#: Operator routes no client calls yet, each with its reason; a route not here and not
#: called by a scenario fails the coverage test.
NOT_IN_CLIENTS = {
    "queue_pause": "an operator's call (the console, manage.py jobqueue), not a client's",
    "queue_resume": "an operator's call (the console, manage.py jobqueue), not a client's",
    "limits_list": "an operator's call (the console, manage.py jobqueue limits), not a client's",
    "limits_set": "an operator's call (the console, manage.py jobqueue limits), not a client's",
    "limits_clear": "an operator's call (the console, manage.py jobqueue limits), not a client's",
    "unique_locks": "a Pro admin route, operated from the console",
    "unique_lock_release": "a Pro admin route, operated from the console",
    "jobs_bulk": "a Pro route, and the conformance gateways run without a licence; the "
    "Python client's bulk is tested on a licensed gateway in tests/client/test_bulk_progress.py",
    "enqueue_workflow": "in the TypeScript client only so far (enqueueWorkflow, tested by "
    "clients/typescript/test/workflows.test.mjs); a conformance scenario would need every client",
    "get_batch": "in the TypeScript client only so far (getBatch, tested by "
    "clients/typescript/test/workflows.test.mjs); a conformance scenario would need every client",
    "open_batch": "in the TypeScript client only so far (openBatch, tested by "
    "clients/typescript/test/workflows.test.mjs); a conformance scenario would need every client",
    "seal_batch": "in the TypeScript client only so far (sealBatch, tested by "
    "clients/typescript/test/workflows.test.mjs); a conformance scenario would need every client",
    "get_workflow": "in the TypeScript client only so far (getWorkflow, tested by "
    "clients/typescript/test/workflows.test.mjs); a conformance scenario would need every client",
}
#: Seconds a worker may take to drain its jobs.
WORKER_TIMEOUT_S = 120
WORKER_JOBS = 20
#: How long each job running at the SIGTERM takes, ms.
SLEEP_MS = 2_000


@pytest.fixture(scope="module")
def gateways(django_db_setup: None, django_db_blocker: object) -> Iterator[dict[str, str]]:
    """The base URL of each set-up's gateway (README "The gateways the harness provides")."""
    with (
        django_db_blocker.unblock(),  # type: ignore[attr-defined]
        live_gateway(cf.GATEWAY_JOBQUEUE) as default,
        live_gateway(cf.LIMITED_JOBQUEUE) as limited,
        live_gateway(
            cf.GATEWAY_JOBQUEUE, env={"DATABASE_URL": cf.DOWN_DATABASE_URL}, wsgiref=True
        ) as down,
        cf.text_plain_proxy(default) as text_plain,
    ):
        yield {
            "default": default,
            "limited": limited,
            "database-down": down,
            "text-plain": text_plain,
        }


def _verbs(step: dict[str, object]) -> str:
    name = str(step.get("verb") or step.get("call") or step.get("op") or "")
    for prefix in ("ids_", "id_", "id."):
        if name.startswith(prefix):
            return "ids." + name[len(prefix) :]
    return name


def test_every_route_has_a_scenario(gateways):
    spec = httpx.get(f"{gateways['default']}/openapi.json", timeout=10).json()
    operations = {
        op["operationId"]
        for methods in spec["paths"].values()
        for op in methods.values()
        if isinstance(op, dict) and "operationId" in op
    }
    used: set[str] = set()
    for setup in cf.SETUPS:
        for path in cf.scenario_files(setup):
            for step in json.loads(path.read_text())["steps"]:
                verb = _verbs(step)
                assert verb in VERB_OPERATIONS, f"{path.name}: unknown verb {verb!r}"
                used.add(VERB_OPERATIONS[verb])
    assert set(NOT_IN_CLIENTS) <= operations, set(NOT_IN_CLIENTS) - operations
    uncovered = operations - used - set(NOT_IN_CLIENTS)
    assert not uncovered, f"routes no conformance scenario calls: {sorted(uncovered)}"


def test_languages_found():
    found = cf.languages()
    for lang in ("python", "typescript", "java", "rust", "csharp", "go", "ruby", "php", "crystal"):
        assert lang in found, f"clients/{lang}/conformance is missing"


@pytest.mark.parametrize("lang", cf.languages())
def test_conformance(lang, gateways, tmp_path):
    cf.build(lang)
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(cf.issue_roles(f"cf-{lang}")))
    for setup in cf.SETUPS:
        files = cf.scenario_files(setup)
        assert files, f"no scenario in {setup}"
        directory = files[0].parent
        if setup == "limited":
            cf.wait_for_rate_window()
        code, output = cf.run_scenarios(lang, directory, cf.runner_env(gateways[setup], tokens))
        lines = output.splitlines()
        for path in files:
            name = cf.scenario_name(path)
            assert f"ok {name}" in lines, f"{lang} {setup}: {name} did not pass:\n{output}"
        assert f"{len(files)} passed, 0 failed" in lines, f"{lang} {setup}:\n{output}"
        assert code == 0, f"{lang} {setup}: exit status {code}\n{output}"
    _check_stored(lang)


def _check_stored(lang: str) -> None:
    """The stored states every run must leave (README "Stored states the harness checks")."""
    refused = Job.objects.filter(queue__startswith="cf-none-")
    assert not refused.exists(), (lang, list(refused.values_list("queue", "job_type")))
    ours = Job.objects.filter(queue__startswith="cf-")
    assert ours.exists(), f"{lang}: the scenarios stored no job"
    held = ours.filter(status=JobStatus.PROCESSING)
    assert not held.exists(), (lang, list(held.values_list("queue", "jid")))
    # Each scenario's own queues: a done job has a result time, a failed one its error.
    for job in ours.filter(status=JobStatus.DONE):
        assert job.finished_at is not None, (lang, job.jid)
    bad = ours.filter(Q(status=JobStatus.MAX_RETRY) | Q(status=JobStatus.ERROR)).filter(attempt=0)
    assert not bad.exists(), (lang, list(bad.values_list("jid", flat=True)))


@pytest.mark.parametrize("lang", cf.languages())
def test_worker_runs_echo_and_spawn_and_finishes_running_jobs_on_sigterm(
    lang, gateways, tmp_path, make_token
):
    """``conformance worker``: echo jobs, an enqueue from inside a handler, then SIGTERM
    while four jobs run: they finish and are reported, and the worker exits 0."""
    cf.build(lang)

    queue = f"cf-worker-{lang}"
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(cf.issue_roles(f"cfw-{lang}")))
    url = gateways["default"]
    with Client(url, make_token()) as jq:
        echoes = [
            r.jid
            for r in jq.enqueue_batch(
                [{"job_type": "conformance.echo", "queue": queue, "payload": {"n": n}}
                 for n in range(WORKER_JOBS)]
            )
        ]  # fmt: skip
        spawn = jq.enqueue(
            "conformance.spawn",
            {"job_type": "conformance.echo", "queue": queue, "payload": {"child": lang}},
            queue=queue,
        ).jid
    env = cf.runner_env(url, tokens, {"JOBQUEUE_QUEUE": queue, "JOBQUEUE_CONCURRENCY": "4"})
    log = tmp_path / "worker.log"
    sleeps: list[str] = []
    with log.open("w") as out:
        worker = subprocess.Popen(  # noqa: S603
            [str(cf.CLIENTS / lang / "conformance"), "worker"],
            cwd=cf.ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + WORKER_TIMEOUT_S
            while Job.objects.filter(queue=queue, status=JobStatus.DONE).count() < WORKER_JOBS + 2:
                assert worker.poll() is None, f"{lang} worker exited:\n{log.read_text()}"
                assert time.monotonic() < deadline, (
                    f"{lang} worker: {list(Job.objects.filter(queue=queue).values_list('status'))}"
                    f"\n{log.read_text()}"
                )
                time.sleep(0.2)
            # SIGTERM while four jobs run: each finishes and is reported before the exit.
            with Client(url, make_token()) as jq:
                spec = {"job_type": "conformance.sleep", "queue": queue}
                sleeps = [
                    r.jid for r in jq.enqueue_batch([{**spec, "payload": {"ms": SLEEP_MS}}] * 4)
                ]
            running = Job.objects.filter(jid__in=sleeps, status=JobStatus.PROCESSING)
            while running.count() < 4:
                assert worker.poll() is None, f"{lang} worker exited:\n{log.read_text()}"
                assert time.monotonic() < deadline, f"{lang}: the sleep jobs did not all start"
                time.sleep(0.05)
        finally:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
    status = worker.returncode
    assert status == 0, f"{lang} worker exit status {status}:\n{log.read_text()}"
    for jid in echoes:
        job = Job.objects.get(jid=jid)
        assert job.result == {"lang": lang, "payload": job.payload}, (lang, job.result)
    parent = Job.objects.get(jid=spawn)
    assert parent.result["lang"] == lang, parent.result
    child = Job.objects.get(jid=parent.result["jid"])
    assert (child.queue, child.job_type, child.status) == (queue, "conformance.echo", "done")
    assert child.result == {"lang": lang, "payload": {"child": lang}}
    for job in Job.objects.filter(jid__in=sleeps):
        assert (job.status, job.attempt) == (JobStatus.DONE, 1), (lang, job.status, job.attempt)
        assert job.result == {"lang": lang, "slept": SLEEP_MS}, (lang, job.result)
    assert Job.objects.filter(queue=queue).count() == WORKER_JOBS + 2 + 4
    # A clean exit stops its worker name (the worker protocol's last step).
    mine = [w for w in Worker.objects.all() if queue in (w.queues or [])]
    assert mine, f"{lang}: the worker registered no row for {queue}"
    assert all(w.stopped_at is not None for w in mine), [(w.name, w.stopped_at) for w in mine]
