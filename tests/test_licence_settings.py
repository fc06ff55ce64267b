"""Tests of the project's licence (the Pro gate, docs/design.md#core-and-pro): the
``JOBQUEUE`` setting read by current_licence, require_pro and the system check.

Every test makes its own Ed25519 key pairs; none makes a network call. The tests
need Django settings and skip without them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import date

import pytest
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobqueue.store import licence as lic
from django_jobqueue.store.licence import issue_licence, key_fingerprint
from tests import licence_helpers

#: The shared fixtures (tests/licence_helpers.py), found by the tests under these names.
pair = licence_helpers.pair
token = licence_helpers.token


def _has_settings() -> bool:
    from django.conf import settings

    try:
        return bool(settings.INSTALLED_APPS is not None)
    except ImproperlyConfigured:
        return False


needs_settings = pytest.mark.skipif(not _has_settings(), reason="no Django settings")
#: ``jobqueue(key, public_keys=None)`` overrides ``JOBQUEUE`` with that licence.
Settings = Callable[..., override_settings]


@pytest.fixture
def jobqueue(pair: tuple[str, str]) -> Settings:
    """Return a factory of ``override_settings(JOBQUEUE=...)`` trusting ``pair``."""

    def factory(key: str, public_keys: list[str] | None = None) -> override_settings:
        keys = [pair[1]] if public_keys is None else public_keys
        return override_settings(JOBQUEUE={"LICENCE_KEY": key, "LICENCE_PUBLIC_KEYS": keys})

    return factory


@needs_settings
def test_current_licence__reads_the_setting_with_extra_public_keys(
    jobqueue: Settings, token: str
) -> None:
    with jobqueue(token):
        assert lic.current_licence().status == "valid"
        assert lic.is_pro()
        lic.require_pro("unique_mode 'until_executed'")
    with jobqueue(token, public_keys=[]):
        assert lic.current_licence().status == "bad_signature"
        assert not lic.is_pro()
    with jobqueue(""):
        assert lic.current_licence().status == "missing"


@needs_settings
def test_require_pro__raises_without_a_valid_licence(jobqueue: Settings) -> None:
    from django_jobqueue.core.exceptions import ProRequired

    with jobqueue(""), pytest.raises(ProRequired) as caught:
        lic.require_pro("unique_mode 'until_executed'")

    assert str(caught.value) == (
        "unique_mode 'until_executed' needs a Pro licence, but no licence key is set; "
        "set JOBQUEUE['LICENCE_KEY'] to a valid Pro key, or use a Core feature instead."
    )
    assert caught.value.code == "pro_required"


@needs_settings
def test_check_licence__nothing_when_valid_or_missing(jobqueue: Settings, token: str) -> None:
    with jobqueue(token):
        assert lic.check_licence(None) == []
    with jobqueue(""):
        assert lic.check_licence(None) == []


HINT = (
    "Set JOBQUEUE['LICENCE_KEY'] to a current Pro key from your vendor, "
    "or remove it to run as Core without this warning."
)


@needs_settings
def test_check_licence__warns_when_expired(pair: tuple[str, str], jobqueue: Settings) -> None:
    expired = issue_licence(pair[0], licensee="ACME", expires_at=date(2020, 1, 31))

    with jobqueue(expired):
        assert lic.check_licence(None) == [
            CheckWarning(
                "JOBQUEUE['LICENCE_KEY'] does not enable Pro: the licence key expired at "
                "2020-01-31T23:59:59+00:00 (expired); the project runs as Core.",
                hint=HINT,
                id="django_jobqueue.W010",
            )
        ]


@needs_settings
def test_check_licence__warns_when_malformed(jobqueue: Settings) -> None:
    with jobqueue("garbage"):
        assert lic.check_licence(None) == [
            CheckWarning(
                "JOBQUEUE['LICENCE_KEY'] does not enable Pro: the licence key is not a "
                "jq1.<claims>.<signature> token (malformed); the project runs as Core.",
                hint=HINT,
                id="django_jobqueue.W010",
            )
        ]


@needs_settings
def test_check_licence__warns_when_wrongly_signed(
    pair: tuple[str, str], jobqueue: Settings, token: str
) -> None:
    with jobqueue(token, public_keys=[]):
        assert lic.check_licence(None) == [
            CheckWarning(
                "JOBQUEUE['LICENCE_KEY'] does not enable Pro: the licence key was signed by "
                f"key {key_fingerprint(pair[1])}, which is not trusted (bad_signature); the "
                "project runs as Core.",
                hint=HINT,
                id="django_jobqueue.W010",
            )
        ]


@needs_settings
def test_check_licence__warns_about_an_unusable_public_key(
    pair: tuple[str, str], jobqueue: Settings, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    with jobqueue(token, public_keys=["not a key", pair[1]]):
        assert lic.check_licence(None) == [
            CheckWarning(
                "JOBQUEUE['LICENCE_PUBLIC_KEYS'][0] is unusable: "
                "A public key must be PEM or base64 of 32 raw Ed25519 bytes.",
                hint="Use a PEM public key or base64 of its 32 raw Ed25519 bytes.",
                id="django_jobqueue.W011",
            )
        ]
        assert lic.current_licence().status == "valid"
    assert [r.getMessage() for r in caplog.records] == [
        "Ignoring a licence public key: JOBQUEUE['LICENCE_PUBLIC_KEYS'][0] is unusable: "
        "A public key must be PEM or base64 of 32 raw Ed25519 bytes."
    ]
