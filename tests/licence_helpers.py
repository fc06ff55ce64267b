"""Helpers of the licence tests (tests/test_licence*.py): times, base64url, key pairs.

The fixtures ``pair`` and ``token`` are taken in by a test module assigning them to
module names of its own (``pair = licence_helpers.pair``); ``pair`` is then made
once per module.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

import pytest

from django_jobqueue.store.licence import generate_key_pair, issue_licence

REPO = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
EXPIRES = datetime(2027, 12, 31, 23, 59, 59, tzinfo=UTC)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@pytest.fixture(scope="module")
def pair() -> tuple[str, str]:
    """The test's own vendor key pair (private PEM, public PEM)."""
    return generate_key_pair()


@pytest.fixture
def token(pair: tuple[str, str]) -> str:
    return issue_licence(pair[0], licensee="ACME Ltd", expires_at=EXPIRES)
