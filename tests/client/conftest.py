"""Fixtures of the client tests: a live gateway per module, tokens on it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from jobqueue_client import Client

from django_jobqueue.store.apitokens import issue_token

from .live import live_gateway

#: The server's JOBQUEUE in these tests: heartbeats every 0.5 s, so a cancel request
#: arrives quickly, but a 30 s lease: under a loaded machine's stalls (CI runs every
#: database's leg at once on two cores) a 3 s lease expired between claim and report,
#: and the reaped job ran twice. Tests of expiry take their own short lease_ms.
SERVER_JOBQUEUE = {"LEASE_MS": 30_000, "HEARTBEAT_MS": 500, "GATEWAY": {"CLAIM_POLL_MS": 100}}


@pytest.fixture(scope="module")
def gateway_url(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """The base URL of a gateway server shared by the tests of a module."""
    with django_db_blocker.unblock(), live_gateway(SERVER_JOBQUEUE) as url:
        yield url


@pytest.fixture
def make_token(transactional_db: None) -> Callable[..., str]:
    """Return ``make(scopes=..., queues=...)`` -> a committed token's text."""

    def make(
        scopes: tuple[str, ...] = ("produce", "read", "work"), queues: tuple[str, ...] = ("*",)
    ) -> str:
        return issue_token("client-tests", queues=queues, scopes=scopes)[1]

    return make


@pytest.fixture
def client(gateway_url: str, make_token: Callable[..., str]) -> Iterator[Client]:
    """A sync client with a produce/read/work token on every queue."""
    with Client(gateway_url, make_token()) as jq:
        yield jq
