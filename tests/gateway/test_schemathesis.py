"""schemathesis against /sdk/openapi.json, in-process through Django's WSGI app.

Every route, with a real admin token (and a Pro licence, so the Pro routes are
reached): no answer is a 500, every status is documented, and every body matches its
documented schema. Bounded to a few examples per route so one database runs in
seconds.
"""

from __future__ import annotations

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

schema = schemathesis.openapi.from_wsgi("/sdk/openapi.json", get_wsgi_application())

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture
def token(make_token, pro):
    """An admin token on every queue, under a Pro licence.

    As Django's test client does, the WSGI handler's request signals must not close
    the test's database connection (and with it the test's transaction).
    """
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    try:
        yield make_token(scopes=("admin",))
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)
def test_gateway_conforms_to_its_openapi_schema(case, token):
    if isinstance(case.body, dict) and isinstance(case.body.get("wait_ms"), int):
        case.body["wait_ms"] = min(case.body["wait_ms"], 20)  # a long-poll: keep it short
    case.call_and_validate(headers={"Authorization": f"Bearer {token}"}, checks=CHECKS)
