"""POST /sdk/jobs, /sdk/jobs/batch, GET /sdk/jobs/{jid}, cancel and retry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from django_jobqueue.models import Job, JobStatus
from tests.gateway.conftest import table_counts

pytestmark = pytest.mark.django_db


def job(**options):
    return {"queue": "gw", "job_type": "gw.echo", "payload": {"n": 1}, **options}


def test_enqueue__201_with_every_option(api):
    response = api.post(
        "/sdk/jobs",
        job(
            priority=5,
            delay="10s",
            expires_ms=60_000,
            timeout_ms=5_000,
            max_retry=2,
            unique_key="k1",
            unique_ttl_ms=60_000,
            id="order:1",
        ),
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "enqueued"
    row = Job.objects.get(jid=body["jid"])
    assert (row.queue, row.job_type, row.payload) == ("gw", "gw.echo", {"n": 1})
    assert (row.priority, row.timeout_ms, row.max_retry) == (5, 5_000, 2)
    assert (row.job_id, row.unique_key, row.unique_mode) == ("order:1", "k1", "while_locked")
    assert row.run_at > row.created_at + timedelta(seconds=9)
    assert row.expires_at is not None


def test_enqueue__run_at_and_default_queue(api):
    at = datetime.now(UTC) + timedelta(hours=1)
    response = api.post("/sdk/jobs", {"job_type": "gw.echo", "run_at": at.isoformat()})
    assert response.status_code == 201
    row = Job.objects.get(jid=response.json()["jid"])
    assert row.queue == "gw"
    assert abs(row.run_at - at) < timedelta(milliseconds=1)


def test_enqueue__deduplicated_is_200_with_the_holder(api):
    first = api.post("/sdk/jobs", job(unique_key="same")).json()
    second = api.post("/sdk/jobs", job(unique_key="same"))
    assert second.status_code == 200
    assert second.json() == {"status": "deduplicated", "jid": first["jid"]}
    assert Job.objects.count() == 1


def test_enqueue__held_id_is_409_with_the_holder(api):
    first = api.post("/sdk/jobs", job(id="x")).json()
    response = api.post("/sdk/jobs", job(id="x"))
    assert response.status_code == 409
    assert response.json()["error"] == "duplicate_job"
    assert response.json()["jid"] == first["jid"]


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"priority": 0}, "priority"),
        ({"priority": "1"}, "priority"),
        ({"delay": "soon"}, "delay"),
        ({"delay": "1s", "run_at": "2030-01-01T00:00:00Z"}, "run_at"),
        ({"run_at": "2030-01-01T00:00:00"}, "run_at"),
        ({"run_at": 1_900_000_000}, "run_at"),  # a number is no time: ISO text only
        ({"run_at": 1_900_000_000.5}, "run_at"),
        ({"run_at": True}, "run_at"),
        ({"unique_key": "k", "unique_mode": "forever"}, "unique_mode"),
        ({"job_type": "no.such.type"}, "job_type"),
        ({"queue": "q\x00"}, "queue"),
        ({"payload": "a\x00b"}, "payload"),
        ({"id": ""}, "id"),
        ({"max_retry": -1}, "max_retry"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_enqueue__invalid_is_422_naming_the_field(api, options, field):
    response = api.post("/sdk/jobs", job(**options))
    assert response.status_code == 422, response.content
    body = response.json()
    assert body["error"] == "invalid_request"
    assert body["field"] == field
    assert Job.objects.count() == 0


def test_enqueue__pro_mode_without_licence_is_402(api):
    response = api.post("/sdk/jobs", job(unique_key="k", unique_mode="until_executed"))
    assert response.status_code == 402
    assert response.json()["error"] == "pro_required"
    assert Job.objects.count() == 0


def test_enqueue__pro_mode_with_licence(api, pro):
    response = api.post("/sdk/jobs", job(unique_key="k", unique_mode="until_executed"))
    assert response.status_code == 201
    assert Job.objects.get().unique_mode == "until_executed"


def test_batch__stores_all_with_dedupe_in_its_slot(api):
    response = api.post(
        "/sdk/jobs/batch",
        {"jobs": [job(unique_key="a"), job(), job(unique_key="a")]},
    )
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["enqueued", "enqueued", "deduplicated"]
    assert results[2]["jid"] == results[0]["jid"]
    assert Job.objects.count() == 2


def test_batch__422_names_index_and_field_and_stores_nothing(api):
    api.post("/sdk/jobs", job())
    before = table_counts()
    response = api.post("/sdk/jobs/batch", {"jobs": [job(), job(), job(priority=0)]})
    assert response.status_code == 422
    body = response.json()
    assert (body["index"], body["field"]) == (2, "jobs[2].priority")
    assert table_counts() == before


def test_batch__a_domain_error_names_its_index(api):
    before = table_counts()
    response = api.post("/sdk/jobs/batch", {"jobs": [job(), job(job_type="nope")]})
    assert response.status_code == 422
    assert (response.json()["index"], response.json()["field"]) == (1, "jobs[1].job_type")
    assert table_counts() == before


def test_batch__one_pro_job_without_licence_is_402_and_stores_nothing(api):
    api.post("/sdk/jobs", job())
    before = table_counts()
    response = api.post(
        "/sdk/jobs/batch",
        {"jobs": [job(), job(unique_key="k", unique_mode="until_executing"), job()]},
    )
    assert response.status_code == 402
    assert response.json()["error"] == "pro_required"
    assert response.json()["index"] == 1
    assert table_counts() == before


def test_batch__a_held_id_rolls_the_batch_back(api):
    api.post("/sdk/jobs", job(id="taken"))
    before = table_counts()
    response = api.post("/sdk/jobs/batch", {"jobs": [job(), job(id="taken")]})
    assert response.status_code == 409
    assert response.json()["index"] == 1
    assert table_counts() == before


def test_batch__an_id_given_twice_on_a_queue_is_422_and_stores_nothing(api):
    before = table_counts()
    response = api.post(
        "/sdk/jobs/batch",
        {"jobs": [job(id="x"), job(id="y"), job(queue="other", id="x"), job(id="x")]},
    )
    assert response.status_code == 422, response.content
    body = response.json()
    assert (body["error"], body["field"], body["index"]) == ("invalid_request", "jobs[3].id", 3)
    assert body["detail"] == (
        "Job id 'x' on queue 'gw' is also given to jobs[0]; a batch names each id once."
    )
    assert "jid" not in body
    assert table_counts() == before


def test_batch__a_held_id_names_the_tables_holder_not_a_job_of_the_batch(api):
    holder = api.post("/sdk/jobs", job(id="taken")).json()["jid"]
    response = api.post("/sdk/jobs/batch", {"jobs": [job(unique_key="k"), job(id="taken")]})
    assert response.status_code == 409
    assert (response.json()["jid"], response.json()["index"]) == (holder, 1)
    assert api.get(f"/sdk/jobs/{holder}").status_code == 200
    assert list(Job.objects.values_list("jid", flat=True)) == [holder]


def test_batch__an_id_deduplicated_by_an_earlier_jobs_unique_key_is_its_answer(api):
    response = api.post(
        "/sdk/jobs/batch", {"jobs": [job(id="a", unique_key="k"), job(id="b", unique_key="k")]}
    )
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["enqueued", "deduplicated"]
    assert results[1]["jid"] == results[0]["jid"]
    assert api.get(f"/sdk/jobs/{results[0]['jid']}").json()["id"] == "a"


def test_batch__a_free_id_whose_unique_key_a_stored_job_holds_is_deduplicated_as_alone(api):
    holder = api.post("/sdk/jobs", job(id="first", unique_key="k")).json()["jid"]
    alone = api.post("/sdk/jobs", job(id="second", unique_key="k"))
    assert (alone.status_code, alone.json()) == (200, {"status": "deduplicated", "jid": holder})
    response = api.post("/sdk/jobs/batch", {"jobs": [job(), job(id="second", unique_key="k")]})
    assert response.status_code == 200, response.content
    results = response.json()["results"]
    assert [r["status"] for r in results] == ["enqueued", "deduplicated"]
    assert results[1]["jid"] == holder
    assert Job.objects.count() == 2
    # Its id held as well (by the same job): that is the 409 of POST /sdk/jobs.
    taken = api.post("/sdk/jobs/batch", {"jobs": [job(), job(id="first", unique_key="k")]})
    assert taken.status_code == 409, taken.content
    assert (taken.json()["jid"], taken.json()["index"]) == (holder, 1)
    assert Job.objects.count() == 2


def test_batch__an_id_whose_hold_has_ended_is_free_though_its_hash_is_still_set(api):
    """The id hold of the holder ended (its id_held_until passed) but no write has
    cleared its hash yet, and the holder's unique key is live: alone and in a batch
    that is a dedupe onto the key's holder, not a 409 (the id is free)."""
    holder = api.post("/sdk/jobs", job(id="x", unique_key="k")).json()["jid"]
    Job.objects.filter(jid=holder).update(id_held_until=timezone.now() - timedelta(seconds=1))
    response = api.post("/sdk/jobs/batch", {"jobs": [job(id="x", unique_key="k")]})
    assert response.status_code == 200, response.content
    assert response.json()["results"] == [{"status": "deduplicated", "jid": holder}]
    alone = api.post("/sdk/jobs", job(id="x", unique_key="k"))
    assert (alone.status_code, alone.json()) == (200, {"status": "deduplicated", "jid": holder})
    assert Job.objects.count() == 1


def test_batch__over_max_batch_is_422(api):
    with override_settings(JOBQUEUE={"GATEWAY": {"MAX_BATCH": 2}}):
        response = api.post("/sdk/jobs/batch", {"jobs": [job(), job(), job()]})
    assert response.status_code == 422
    assert response.json()["field"] == "jobs"
    assert Job.objects.count() == 0


def test_batch__empty_is_422(api):
    response = api.post("/sdk/jobs/batch", {"jobs": []})
    assert response.status_code == 422
    assert response.json()["field"] == "jobs"


def test_get_job__state_attempts_and_payload(api):
    jid = api.post("/sdk/jobs", job()).json()["jid"]
    response = api.get(f"/sdk/jobs/{jid}")
    assert response.status_code == 200
    body = response.json()
    assert (body["jid"], body["state"], body["status"], body["attempt"]) == (
        jid,
        "waiting",
        "init",
        0,
    )
    assert body["payload"] == {"n": 1}
    assert body["last_error"] is None


def test_get_job__never_shows_a_secure_job_types_payload_or_result(api):
    jid = api.post("/sdk/jobs", {"job_type": "gw.secret", "payload": {"card": "4111"}}).json()[
        "jid"
    ]
    Job.objects.filter(jid=jid).update(status=JobStatus.DONE, waiting=False, result={"x": 1})
    body = api.get(f"/sdk/jobs/{jid}").json()
    assert body["secure"] is True
    assert body["payload"] is None
    assert body["result"] is None
    assert "4111" not in api.get(f"/sdk/jobs/{jid}").content.decode()


@pytest.mark.parametrize("jid", ["0" * 32, "nope", "%00", "A" * 5000])
def test_get_job__unknown_or_malformed_is_404(api, jid):
    response = api.get(f"/sdk/jobs/{jid}")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_cancel_job__waiting_becomes_cancelled(api):
    jid = api.post("/sdk/jobs", job()).json()["jid"]
    response = api.post(f"/sdk/jobs/{jid}/cancel")
    assert response.status_code == 200
    assert response.json() == {"cancelled": True, "cancel_requested": False}
    assert Job.objects.get(jid=jid).status == JobStatus.CANCELLED
    assert api.post(f"/sdk/jobs/{jid}/cancel").json() == {
        "cancelled": False,
        "cancel_requested": False,
    }


def test_retry_job__dead_letter_starts_again_with_admin_scope(api, admin_api):
    jid = api.post("/sdk/jobs", job()).json()["jid"]
    Job.objects.filter(jid=jid).update(status=JobStatus.MAX_RETRY, waiting=False, attempt=4)
    assert api.post(f"/sdk/jobs/{jid}/retry").status_code == 403
    response = admin_api.post(f"/sdk/jobs/{jid}/retry")
    assert response.status_code == 200
    assert response.json() == {"retried": True}
    row = Job.objects.get(jid=jid)
    assert (row.status, row.attempt, row.waiting) == (JobStatus.INIT, 0, True)
