"""Tokens, scopes, queues, rate, body limits and garbage: never a 500."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_jobqueue.models import ApiToken, Job
from django_jobqueue.store.apitokens import authenticate, issue_token, revoke_token

pytestmark = pytest.mark.django_db

JOB = {"queue": "gw", "job_type": "gw.echo", "payload": {}}


def test_no_token_is_401(client_for):
    response = client_for(None).post("/sdk/jobs", JOB)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response["WWW-Authenticate"] == "Bearer"
    # The detail shows the header to send whole, not cut off after "Bearer".
    assert response.json()["detail"] == "Give a token: Authorization: Bearer jqt_..."


@pytest.mark.parametrize(
    "header",
    ["Bearer nope", "Bearer jqt_" + "a" * 43, "Basic dXNlcjpwYXNz", "Bearer", "bearer  jqt_x"],
)
def test_bad_token_is_401(client_for, header):
    response = client_for(None).post("/sdk/jobs", JOB, headers={"Authorization": header})
    assert response.status_code == 401


def test_token_stores_only_a_hash_and_is_found_by_prefix(make_token):
    text = make_token()
    row = ApiToken.objects.get()
    assert text.startswith("jqt_") and len(text) == 47
    assert text[4:] not in (row.key_hash, row.prefix) and row.prefix == text[4:16]
    assert authenticate(text) == row
    assert authenticate(text[:-1] + ("A" if text[-1] != "A" else "B")) is None


def test_revoked_token_is_401(make_token, client_for):
    text = make_token()
    assert revoke_token(text) == 1
    assert client_for(text).post("/sdk/jobs", JOB).status_code == 401


def test_expired_token_is_401(make_token, client_for):
    text = make_token(expires_at=datetime.now(UTC) - timedelta(seconds=1))
    assert client_for(text).post("/sdk/jobs", JOB).status_code == 401


def test_wrong_scope_is_403(make_token, client_for):
    reader = client_for(make_token(scopes=("read",)))
    response = reader.post("/sdk/jobs", JOB)
    assert response.status_code == 403
    assert response.json()["scope"] == "produce"
    worker = client_for(make_token(scopes=("produce",)))
    assert worker.post("/sdk/worker/claim", {"queues": ["gw"]}).status_code == 403
    assert Job.objects.count() == 0


def test_wrong_queue_is_403(make_token, client_for):
    api = client_for(make_token(queues=("emails", "gw-*")))
    assert api.post("/sdk/jobs", JOB).status_code == 403
    assert api.post("/sdk/jobs", {**JOB, "queue": "gw-x"}).status_code == 201
    assert api.post("/sdk/jobs", {**JOB, "queue": "emails"}).status_code == 201
    batch = api.post("/sdk/jobs/batch", {"jobs": [{**JOB, "queue": "emails"}, JOB]})
    assert batch.status_code == 403
    assert api.post("/sdk/worker/claim", {"queues": ["emails", "gw"]}).status_code == 403
    assert Job.objects.count() == 2


def test_wrong_queue_by_jid_is_403(make_token, client_for, api):
    jid = api.post("/sdk/jobs", JOB).json()["jid"]
    other = client_for(make_token(queues=("emails",)))
    assert other.get(f"/sdk/jobs/{jid}").status_code == 403
    assert other.post(f"/sdk/jobs/{jid}/cancel").status_code == 403


def test_last_used_at_is_written_at_most_once_a_minute(make_token, client_for):
    text = make_token()
    client_for(text).get("/sdk/jobs/" + "0" * 32)
    first = ApiToken.objects.get().last_used_at
    assert first is not None
    client_for(text).get("/sdk/jobs/" + "0" * 32)
    assert ApiToken.objects.get().last_used_at == first
    ApiToken.objects.update(last_used_at=first - timedelta(minutes=2))
    client_for(text).get("/sdk/jobs/" + "0" * 32)
    assert ApiToken.objects.get().last_used_at > first - timedelta(minutes=1)


def test_rate_limit_is_429_with_retry_after(api):
    with override_settings(JOBQUEUE={"GATEWAY": {"RATE_PER_MINUTE": 2}}):
        from django.core.cache import cache

        cache.clear()
        codes = [api.get("/sdk/jobs/" + "0" * 32).status_code for _ in range(3)]
    assert codes[:2] == [404, 404]
    assert codes[2] == 429
    response = None
    with override_settings(JOBQUEUE={"GATEWAY": {"RATE_PER_MINUTE": 2}}):
        response = api.get("/sdk/jobs/" + "0" * 32)
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60


def test_body_over_the_limit_is_413(api):
    with override_settings(JOBQUEUE={"GATEWAY": {"MAX_BODY_BYTES": 100}}):
        response = api.post("/sdk/jobs", {**JOB, "payload": "x" * 200})
    assert response.status_code == 413
    assert response.json()["error"] == "body_too_large"
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        ("{not json", "application/json"),
        ("[" * 100_000, "application/json"),
        (b"\xff\xfe", "application/json"),
        ('{"queue": "gw"}', "text/plain"),
        ("queue=gw", "application/x-www-form-urlencoded"),
    ],
)
def test_body_not_json_is_415(api, body, content_type):
    response = api.client.post(
        "/sdk/jobs",
        data=body,
        content_type=content_type,
        headers={"Authorization": f"Bearer {api.token}"},
    )
    assert response.status_code == 415, response.content
    assert response.json()["error"] == "not_json"


def test_json_that_is_not_an_object_is_422(api):
    for body in ("[]", "1", "null", '"x"'):
        response = api.client.post(
            "/sdk/jobs",
            data=body,
            content_type="application/json",
            headers={"Authorization": f"Bearer {api.token}"},
        )
        assert response.status_code in (400, 422), (body, response.content)


@pytest.mark.parametrize(
    "path",
    [
        "/sdk/",
        "/sdk/nope",
        "/sdk/jobs/../../etc",
        "/sdk/jobs/%00/cancel",
        "/sdk/queues/%00/ids/x",
        "/sdk/queues/q/ids/%00",
        "/sdk/queues/q/jobs?limit=abc",
        "/sdk/queues/q/jobs?limit=0",
        "/sdk/queues/q/jobs?cursor=%00",
        "/sdk/queues/q/jobs?state=x",
        "/sdk/queues/" + "q" * 200 + "/jobs",
        "/sdk/unique-locks?cursor=abc",
        "/sdk/queues/q/jobs?prefix=" + "p" * 2000,
    ],
)
def test_garbage_paths_are_never_500(api, path):
    response = api.get(path)
    assert response.status_code in (400, 402, 403, 404, 405, 422), (path, response.content)


@pytest.mark.parametrize(
    "headers",
    [
        {"Authorization": "Bearer \u00e9\u00e9"},
        {"Content-Length": "abc"},
        {"Content-Length": "-5"},
        {"Content-Length": "99999999999"},
        {"Content-Type": "application/json; charset=utf-16"},
        {"X-Forwarded-For": "\x00"},
    ],
)
def test_garbage_headers_are_never_500(api, headers):
    response = api.post("/sdk/jobs", JOB, headers=headers)
    assert 200 <= response.status_code < 500, response.content


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("get", "/sdk/jobs", "POST"),
        ("put", "/sdk/jobs", "POST"),
        ("delete", "/sdk/jobs/batch", "POST"),
        ("post", "/sdk/queues/q/jobs", "GET"),
        ("post", "/sdk/unique-locks", "GET"),
        ("patch", "/sdk/worker/claim", "POST"),
    ],
)
def test_wrong_method_is_a_json_405_with_allow(api, method, path, allow):
    send = getattr(api.client, method)
    response = send(path, headers={"Authorization": f"Bearer {api.token}"})
    assert response.status_code == 405
    assert response["Content-Type"] == "application/json"
    assert response["Allow"] == allow
    body = response.json()
    assert (body["error"], body["field"]) == ("method_not_allowed", None)
    assert body["detail"] == f"{method.upper()} is not a method of {path}; use {allow}."


def test_wrong_method_without_a_token_is_a_json_405(client_for):
    response = client_for(None).client.get("/sdk/jobs/batch")
    assert (response.status_code, response.json()["error"]) == (405, "method_not_allowed")


def test_token_command_create_list_revoke():
    from io import StringIO

    out = StringIO()
    call_command(
        "jobqueue",
        "token",
        "create",
        "--name",
        "node-front",
        "--queues",
        "emails,reports*",
        "--scopes",
        "produce,read",
        stdout=out,
    )
    text = out.getvalue().strip().splitlines()[-1]
    assert text.startswith("jqt_")
    row = authenticate(text)
    assert row is not None and row.queues == ["emails", "reports*"]
    out = StringIO()
    call_command("jobqueue", "token", "list", stdout=out)
    assert "node-front" in out.getvalue() and row.prefix in out.getvalue()
    assert text not in out.getvalue()
    out = StringIO()
    call_command("jobqueue", "token", "revoke", row.prefix, stdout=out)
    assert authenticate(text) is None
    assert "Revoked 1 token" in out.getvalue()


def test_token_prefixes_never_start_with_a_dash(monkeypatch):
    """`jobqueue token revoke PREFIX` would read a leading "-" as an option: the draw
    that would make one is drawn again (urlsafe base64 starts with "-" once in 64)."""
    import secrets
    from io import StringIO

    from django_jobqueue.store import apitokens

    draws = iter(["-" + "a" * 42, "-" + "b" * 42, "c" * 43])
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: next(draws))
    row, text = issue_token("dash", queues=["*"], scopes=["produce"])
    assert row.prefix == "c" * apitokens.PREFIX_LENGTH and text.endswith("c" * 43)
    out = StringIO()
    call_command("jobqueue", "token", "revoke", row.prefix, stdout=out)
    assert "Revoked 1 token" in out.getvalue()


def test_issue_token_refuses_unknown_scopes():
    from django_jobqueue.core.exceptions import InvalidOption

    with pytest.raises(InvalidOption, match="scopes must be"):
        issue_token("x", queues=["*"], scopes=["everything"])


@pytest.mark.parametrize(
    ("gateway", "problem"),
    [
        ({"MAX_BATCH": 0}, "JOBQUEUE['GATEWAY']['MAX_BATCH'] must be an integer >= 1: got 0."),
        ({"COLOUR": 1}, "JOBQUEUE['GATEWAY'] has unknown keys ['COLOUR']"),
        ({"JOB_TYPES": {"x": {"handler": "a.b"}}}, "without a handler: gateway workers run them."),
    ],
)
def test_gateway_settings_are_checked(gateway, problem):
    from django_jobqueue.core.conf import validate_settings

    with override_settings(JOBQUEUE={"GATEWAY": gateway}):
        problems = validate_settings()
    assert len(problems) == 1 and problem in problems[0]


def test_admin_makes_a_token_and_shows_it_once(admin_client):
    response = admin_client.post(
        "/admin/django_jobqueue/apitoken/add/",
        {"name": "ci", "queues_text": "emails, gw*", "scope_choices": ["work"]},
        follow=True,
    )
    assert response.status_code == 200
    row = ApiToken.objects.get(name="ci")
    (message,) = [str(m) for m in response.context["messages"] if "jqt_" in str(m)]
    text = message.rsplit(" ", 1)[-1]
    assert authenticate(text) == row
    assert (row.queues, row.scopes) == (["emails", "gw*"], ["work"])
