"""Tests of the licence (the Pro gate, docs/design.md#core-and-pro): verify_licence on valid,
expired, tampered, wrongly signed, missing and malformed keys, and the trusted public
keys in any encoding.

Issuing keys, describing them and the command line are in
tests/test_licence_issue.py; the project's licence (settings, checks) in
tests/test_licence_settings.py. Every test makes its own Ed25519 key pairs; none
makes a network call.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, date, datetime, timedelta

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from django_jobqueue.store import licence as lic
from django_jobqueue.store.licence import (
    Edition,
    Licence,
    LicenceStatus,
    generate_key_pair,
    issue_licence,
    key_fingerprint,
    shipped_public_keys,
    verify_licence,
)
from tests import licence_helpers
from tests.licence_helpers import EXPIRES, NOW, REPO, b64url, b64url_decode

#: The shared fixtures (tests/licence_helpers.py), found by the tests under these names.
pair = licence_helpers.pair
token = licence_helpers.token


def sign(claims: object, private_pem: str, *, prefix: str = "jq1") -> str:
    """Build a token by the documented format, independently of the module under test."""
    key = serialization.load_pem_private_key(private_pem.encode(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    signed = f"{prefix}.{b64url(json.dumps(claims).encode())}"
    return f"{signed}.{b64url(key.sign(signed.encode('ascii')))}"


def good_claims(**overrides: object) -> dict[str, object]:
    return {
        "licensee": "ACME Ltd",
        "edition": "pro",
        "issued_at": int(datetime(2026, 1, 1, tzinfo=UTC).timestamp()),
        "expires_at": int(EXPIRES.timestamp()),
        **overrides,
    }


@pytest.fixture(scope="module")
def other_pair() -> tuple[str, str]:
    """A key pair the verifier does not trust."""
    return generate_key_pair()


# --- verify_licence -----------------------------------------------------------------------


def test_verify__valid(pair: tuple[str, str], token: str) -> None:
    assert verify_licence(token, public_keys=[pair[1]], now=NOW) == Licence(
        edition=Edition.PRO,
        licensee="ACME Ltd",
        expires_at=EXPIRES,
        status=LicenceStatus.VALID,
        problem=None,
    )


def test_verify__valid_until_the_last_second(pair: tuple[str, str], token: str) -> None:
    assert verify_licence(token, public_keys=[pair[1]], now=EXPIRES).status == "valid"


def test_verify__expired(pair: tuple[str, str], token: str) -> None:
    result = verify_licence(token, public_keys=[pair[1]], now=EXPIRES + timedelta(seconds=1))

    assert result == Licence(
        edition=Edition.CORE,
        licensee="ACME Ltd",
        expires_at=EXPIRES,
        status=LicenceStatus.EXPIRED,
        problem="the licence key expired at 2027-12-31T23:59:59+00:00",
    )
    assert not result.is_pro


def test_verify__expired_key_issued_in_the_past(pair: tuple[str, str]) -> None:
    old = issue_licence(pair[0], licensee="ACME Ltd", expires_at=date(2020, 1, 31))

    assert verify_licence(old, public_keys=[pair[1]]).status == "expired"


def test_verify__naive_now_is_utc(pair: tuple[str, str], token: str) -> None:
    naive = datetime(2027, 12, 31, 23, 59, 59)

    assert verify_licence(token, public_keys=[pair[1]], now=naive).status == "valid"
    later = naive + timedelta(seconds=1)
    assert verify_licence(token, public_keys=[pair[1]], now=later).status == "expired"


def test_verify__tampered_claims(pair: tuple[str, str], token: str) -> None:
    prefix, body, signature = token.split(".")
    claims = json.loads(b64url_decode(body))
    claims["expires_at"] += 365 * 86_400
    forged = f"{prefix}.{b64url(json.dumps(claims).encode())}.{signature}"

    result = verify_licence(forged, public_keys=[pair[1]], now=NOW)

    assert result == Licence(
        edition=Edition.CORE,
        licensee=None,
        expires_at=None,
        status=LicenceStatus.BAD_SIGNATURE,
        problem="the licence key's signature does not verify with any trusted public key",
    )


def test_verify__tampered_licensee(pair: tuple[str, str], token: str) -> None:
    prefix, body, signature = token.split(".")
    claims = json.loads(b64url_decode(body))
    claims["licensee"] = "Someone Else"
    forged = f"{prefix}.{b64url(json.dumps(claims).encode())}.{signature}"

    assert verify_licence(forged, public_keys=[pair[1]], now=NOW).status == "bad_signature"


def test_verify__tampered_signature(pair: tuple[str, str], token: str) -> None:
    prefix, body, signature = token.split(".")
    raw = bytearray(b64url_decode(signature))
    raw[10] ^= 0x01
    forged = f"{prefix}.{body}.{b64url(bytes(raw))}"

    result = verify_licence(forged, public_keys=[pair[1]], now=NOW)

    assert result.status == LicenceStatus.BAD_SIGNATURE
    assert result.edition == Edition.CORE


def test_verify__wrong_signer(
    pair: tuple[str, str], other_pair: tuple[str, str], token: str
) -> None:
    foreign = issue_licence(other_pair[0], licensee="ACME Ltd", expires_at=EXPIRES)

    result = verify_licence(foreign, public_keys=[pair[1]], now=NOW)

    assert result.status == LicenceStatus.BAD_SIGNATURE
    assert result.problem == (
        f"the licence key was signed by key {key_fingerprint(other_pair[1])}, which is not trusted"
    )


def test_verify__wrong_signer_claiming_a_trusted_key_id(
    pair: tuple[str, str], other_pair: tuple[str, str]
) -> None:
    foreign = issue_licence(
        other_pair[0],
        licensee="ACME Ltd",
        expires_at=EXPIRES,
        key_id=key_fingerprint(pair[1]),
    )

    assert verify_licence(foreign, public_keys=[pair[1]], now=NOW).status == "bad_signature"


def test_verify__wrong_signer_without_key_id(
    pair: tuple[str, str], other_pair: tuple[str, str]
) -> None:
    foreign = sign(good_claims(), other_pair[0])

    assert verify_licence(foreign, public_keys=[pair[1]], now=NOW).status == "bad_signature"
    assert verify_licence(foreign, public_keys=[other_pair[1]], now=NOW).status == "valid"


def test_verify__wrong_signer_against_the_shipped_keys(token: str) -> None:
    assert verify_licence(token, now=NOW).status == LicenceStatus.BAD_SIGNATURE


@pytest.mark.parametrize("key", [None, "", "   ", "\n"])
def test_verify__missing(key: str | None) -> None:
    assert verify_licence(key, now=NOW) == Licence(
        edition=Edition.CORE,
        licensee=None,
        expires_at=None,
        status=LicenceStatus.MISSING,
        problem=None,
    )


def test_verify__surrounding_whitespace_is_ignored(pair: tuple[str, str], token: str) -> None:
    assert verify_licence(f"  {token}\n", public_keys=[pair[1]], now=NOW).status == "valid"


MALFORMED_CLAIMS = {
    "json_array": ["licensee", "ACME"],
    "no_licensee": {k: v for k, v in good_claims().items() if k != "licensee"},
    "empty_licensee": good_claims(licensee=" "),
    "unknown_edition": good_claims(edition="enterprise"),
    "core_edition": good_claims(edition="core"),
    "iso_expiry": good_claims(expires_at="2027-12-31T23:59:59Z"),
    "bool_expiry": good_claims(expires_at=True),
    "float_expiry": good_claims(expires_at=1.5e9),
    "huge_expiry": good_claims(expires_at=10**20),
    "no_issued_at": {k: v for k, v in good_claims().items() if k != "issued_at"},
    "numeric_key_id": good_claims(key_id=7),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_CLAIMS))
def test_verify__malformed_claims_even_if_signed(pair: tuple[str, str], name: str) -> None:
    token = sign(MALFORMED_CLAIMS[name], pair[0])

    result = verify_licence(token, public_keys=[pair[1]], now=NOW)

    assert result.status == LicenceStatus.MALFORMED
    assert result.edition == Edition.CORE
    assert result.licensee is None


def _malformed_tokens(private_pem: str) -> dict[str, str]:
    good = sign(good_claims(), private_pem)
    prefix, body, signature = good.split(".")
    return {
        "garbage": "hello, licence",
        "wrong_prefix": sign(good_claims(), private_pem, prefix="jq2"),
        "no_prefix": f"{body}.{signature}",
        "four_parts": f"{good}.AAAA",
        "empty_parts": "jq1..",
        "bad_base64_characters": f"{prefix}.{body}!.{signature}",
        "padded_base64": f"{prefix}.{body}==.{signature}",
        "impossible_base64_length": f"{prefix}.{body}.{signature}A",
        "non_canonical_base64": f"{prefix}.{body}.{signature[:-1]}B",
        "short_signature": f"{prefix}.{body}.{b64url(b'x' * 63)}",
        "bad_json": f"{prefix}.{b64url(b'{not json')}.{signature}",
        "not_utf8": f"{prefix}.{b64url(bytes([0xFF, 0xFE]))}.{signature}",
        "too_long": f"{prefix}.{b64url(b'x' * 4000)}.{signature}",
    }


@pytest.mark.parametrize(
    "name",
    [
        "garbage",
        "wrong_prefix",
        "no_prefix",
        "four_parts",
        "empty_parts",
        "bad_base64_characters",
        "padded_base64",
        "impossible_base64_length",
        "non_canonical_base64",
        "short_signature",
        "bad_json",
        "not_utf8",
        "too_long",
    ],
)
def test_verify__malformed(pair: tuple[str, str], name: str) -> None:
    token = _malformed_tokens(pair[0])[name]

    result = verify_licence(token, public_keys=[pair[1]], now=NOW)

    assert result.status == LicenceStatus.MALFORMED
    assert result.edition == Edition.CORE
    assert result.problem


def test_verify__non_string_key_is_malformed() -> None:
    assert verify_licence(12345, now=NOW).status == "malformed"  # type: ignore[arg-type]


def test_verify__unknown_claims_are_ignored(pair: tuple[str, str]) -> None:
    token = sign(good_claims(seats=10), pair[0])

    assert verify_licence(token, public_keys=[pair[1]], now=NOW).status == "valid"


def test_verify__rejects_an_unusable_public_key(token: str) -> None:
    with pytest.raises(ValueError, match="PEM or base64"):
        verify_licence(token, public_keys=["not a key"], now=NOW)


# --- public keys -------------------------------------------------------------------------


def _raw_public(public_pem: str) -> bytes:
    return lic.load_public_key(public_pem).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )


@pytest.mark.parametrize("encoding", ["pem", "pem_bytes", "base64", "base64url", "raw"])
def test_public_keys__extendable_in_any_encoding(
    pair: tuple[str, str], token: str, encoding: str
) -> None:
    raw = _raw_public(pair[1])
    public_key = {
        "pem": pair[1],
        "pem_bytes": pair[1].encode(),
        "base64": base64.b64encode(raw).decode(),
        "base64url": b64url(raw),
        "raw": raw,
    }[encoding]

    assert verify_licence(token, public_keys=[public_key], now=NOW).status == "valid"


def test_public_keys__any_trusted_key_verifies(
    pair: tuple[str, str], other_pair: tuple[str, str], token: str
) -> None:
    trusted = [other_pair[1], pair[1]]

    assert verify_licence(token, public_keys=trusted, now=NOW).status == "valid"


def test_public_keys__shipped_vendor_key() -> None:
    shipped = (REPO / "django_jobqueue" / "licence_keys" / "vendor.pub").read_text()

    assert [key_fingerprint(k) for k in shipped_public_keys()] == [key_fingerprint(shipped)]


def test_public_keys__rejects_a_non_ed25519_pem() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )

    with pytest.raises(ValueError, match="not an Ed25519 key"):
        lic.load_public_key(pem)
