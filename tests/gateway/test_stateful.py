"""The worker protocol driven as sequences: a hypothesis state machine over the gateway.

Rules enqueue, claim, heartbeat, complete, fail, cancel (a job waiting or held by a
claim) and report with a stale lease token, in any order hypothesis picks; after
every request: no 5xx, the status is one the OpenAPI document declares for that
operation, and the job's stored status agrees with the model's (a completed job is
``done``, a report on a lost lease is ``409 lease_lost``, a cancel during a claim
sets ``cancel_requested`` that the next heartbeat reports). Bounded: 15 sequences
of at most 20 steps on each database.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from django_jobqueue.gateway.api import api as ninja_api
from django_jobqueue.models import Job, JobStatus
from tests.gateway.conftest import Api

pytestmark = pytest.mark.django_db

_DOC = ninja_api.get_openapi_schema(path_prefix="/sdk")


def _documented(method: str, template: str) -> set[int]:
    return {int(code) for code in _DOC["paths"][template][method]["responses"]}


PAYLOADS = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**31), 2**31) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def machine_for(token: str) -> type[RuleBasedStateMachine]:
    class Protocol(RuleBasedStateMachine):
        waiting = Bundle("waiting")

        def __init__(self) -> None:
            super().__init__()
            self.api = Api(token)
            self.queue = f"st-{uuid.uuid4().hex[:8]}"
            self.held: dict[str, str] = {}  # jid -> lease token
            self.stale: dict[str, str] = {}  # jid -> a token no longer valid
            self.cancelled_held: set[str] = set()

        def _send(self, method: str, template: str, path: str, body: dict) -> object:
            response = self.api.post(path, body)
            assert response.status_code < 500, (path, response.content)
            assert response.status_code in _documented(method, template), (
                path,
                response.status_code,
                response.content,
            )
            return response

        @rule(target=waiting, payload=PAYLOADS, priority=st.integers(1, 10))
        def enqueue(self, payload, priority):
            body = {
                "job_type": "gw.echo",
                "payload": payload,
                "queue": self.queue,
                "priority": priority,
            }
            response = self._send("post", "/sdk/jobs", "/sdk/jobs", body)
            assert response.status_code == 201
            return response.json()["jid"]

        @rule(limit=st.integers(1, 3))
        def claim(self, limit):
            body = {"queues": [self.queue], "limit": limit, "wait_ms": 0, "worker": "st-worker"}
            response = self._send("post", "/sdk/worker/claim", "/sdk/worker/claim", body)
            jobs = response.json()["jobs"]
            assert len(jobs) <= limit
            for job in jobs:
                assert job["jid"] not in self.held  # claimed once
                self.held[job["jid"]] = job["lease_token"]

        @rule(data=st.data())
        def heartbeat(self, data):
            if not self.held:
                return
            jid = data.draw(st.sampled_from(sorted(self.held)))
            path = f"/sdk/worker/jobs/{jid}/heartbeat"
            response = self._send(
                "post", "/sdk/worker/jobs/{jid}/heartbeat", path, {"lease_token": self.held[jid]}
            )
            assert response.status_code == 200
            assert response.json()["cancel_requested"] is (jid in self.cancelled_held)

        @rule(data=st.data(), result=PAYLOADS)
        def complete(self, data, result):
            if not self.held:
                return
            jid = data.draw(st.sampled_from(sorted(self.held)))
            token = self.held.pop(jid)
            path = f"/sdk/worker/jobs/{jid}/complete"
            response = self._send(
                "post",
                "/sdk/worker/jobs/{jid}/complete",
                path,
                {"lease_token": token, "result": result},
            )
            assert response.status_code == 200 and response.json()["status"] == "done"
            assert Job.objects.get(jid=jid).status == JobStatus.DONE
            self.stale[jid] = token
            self.cancelled_held.discard(jid)

        @rule(data=st.data(), retry=st.booleans())
        def fail(self, data, retry):
            if not self.held:
                return
            jid = data.draw(st.sampled_from(sorted(self.held)))
            token = self.held.pop(jid)
            body = {"lease_token": token, "error": "boom", "retry": retry}
            if jid in self.cancelled_held:
                body["cancelled"] = True
            response = self._send(
                "post", "/sdk/worker/jobs/{jid}/fail", f"/sdk/worker/jobs/{jid}/fail", body
            )
            assert response.status_code == 200
            self.stale[jid] = token
            self.cancelled_held.discard(jid)

        @rule(jid=waiting)
        def cancel(self, jid):
            response = self._send("post", "/sdk/jobs/{jid}/cancel", f"/sdk/jobs/{jid}/cancel", {})
            assert response.status_code == 200
            answer = response.json()
            if jid in self.held:  # during a claim: a request, the worker is told
                assert answer["cancel_requested"] or answer["cancelled"] is False
                if answer["cancel_requested"]:
                    self.cancelled_held.add(jid)

        @rule(data=st.data())
        def report_with_a_stale_token(self, data):
            if not self.stale:
                return
            jid = data.draw(st.sampled_from(sorted(self.stale)))
            path = f"/sdk/worker/jobs/{jid}/complete"
            response = self._send(
                "post",
                "/sdk/worker/jobs/{jid}/complete",
                path,
                {"lease_token": self.stale[jid], "result": None},
            )
            assert (response.status_code, response.json()["error"]) == (409, "lease_lost")

        @invariant()
        def held_jobs_are_processing(self):
            if self.held:
                rows = Job.objects.filter(jid__in=list(self.held)).values_list("status", flat=True)
                assert set(rows) <= {JobStatus.PROCESSING}, set(rows)

    return Protocol


def test_the_worker_protocol_as_sequences(make_token):
    token = make_token(scopes=("produce", "read", "work"))
    run_state_machine_as_test(
        machine_for(token),
        settings=settings(
            max_examples=15,
            stateful_step_count=20,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )
