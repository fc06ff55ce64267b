"""Fixtures of the gateway tests: tokens, an authenticated client, table snapshots."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

import pytest
from django.apps import apps
from django.test import Client

from django_jobqueue.gateway import waiting
from django_jobqueue.store.apitokens import issue_token


class Api:
    """A Django test client that sends JSON with a bearer token."""

    def __init__(self, token: str | None) -> None:
        self.client = Client()
        self.token = token

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        base = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        return {**base, **(headers or {})}

    def post(self, path: str, data: Any = None, *, headers: dict[str, str] | None = None) -> Any:
        return self.client.post(
            path,
            data=data if data is not None else {},
            content_type="application/json",
            headers=self._headers(headers),
        )

    def get(self, path: str, data: Any = None, *, headers: dict[str, str] | None = None) -> Any:
        return self.client.get(path, data=data, headers=self._headers(headers))

    def delete(self, path: str) -> Any:
        return self.client.delete(path, headers=self._headers(None))


@pytest.fixture
def make_token(db: None) -> Callable[..., str]:
    """Return ``make(scopes=..., queues=..., expires_at=...)`` -> the token text."""

    def make(
        scopes: tuple[str, ...] = ("produce", "read", "work"),
        queues: tuple[str, ...] = ("*",),
        expires_at: datetime | None = None,
        name: str = "tests",
    ) -> str:
        return issue_token(name, queues=queues, scopes=scopes, expires_at=expires_at)[1]

    return make


@pytest.fixture
def api(make_token: Callable[..., str]) -> Api:
    """A client with a token of every scope but admin, on every queue."""
    return Api(make_token())


@pytest.fixture
def admin_api(make_token: Callable[..., str]) -> Api:
    """A client with an admin token on every queue."""
    return Api(make_token(scopes=("admin",)))


@pytest.fixture
def client_for() -> Callable[[str | None], Api]:
    """Return ``client_for(token)``: a client with that token (None: none)."""
    return Api


def table_counts() -> dict[str, int]:
    """Return the row count of every django_jobqueue table."""
    return {
        model._meta.db_table: model.objects.count()
        for model in apps.get_app_config("django_jobqueue").get_models()
    }


@pytest.fixture(autouse=True)
def _stop_listener() -> Iterator[None]:
    """Close the long-poll's LISTEN connection after each test (the test database is
    dropped at the end)."""
    yield
    waiting.stop_listening()
