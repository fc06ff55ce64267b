"""Tests of the licence (seed 000 "Pro" gate, issue 5 item 4).

Every test makes its own Ed25519 key pairs; none makes a network call. The tests that
read ``JOBQUEUE`` need Django settings and skip without them.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from django_jobqueue import licence as lic
from django_jobqueue.licence import (
    Edition,
    Licence,
    LicenceStatus,
    describe_licence,
    generate_key_pair,
    issue_licence,
    key_fingerprint,
    load_private_key,
    shipped_public_keys,
    verify_licence,
)

REPO = Path(__file__).resolve().parents[1]
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
EXPIRES = datetime(2027, 12, 31, 23, 59, 59, tzinfo=UTC)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


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
def pair() -> tuple[str, str]:
    """The test's own vendor key pair (private PEM, public PEM)."""
    return generate_key_pair()


@pytest.fixture(scope="module")
def other_pair() -> tuple[str, str]:
    """A key pair the verifier does not trust."""
    return generate_key_pair()


@pytest.fixture
def token(pair: tuple[str, str]) -> str:
    return issue_licence(pair[0], licensee="ACME Ltd", expires_at=EXPIRES)


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


# --- issue_licence ----------------------------------------------------------------------------


def test_issue__round_trip(pair: tuple[str, str]) -> None:
    token = issue_licence(
        pair[0],
        licensee="Zoë & Co",
        expires_at=date(2027, 12, 31),
        issued_at=datetime(2026, 1, 1, 9, 30),
    )
    prefix, body, signature = token.split(".")

    assert prefix == "jq1"
    assert json.loads(b64url_decode(body)) == {
        "licensee": "Zoë & Co",
        "edition": "pro",
        "issued_at": int(datetime(2026, 1, 1, 9, 30, tzinfo=UTC).timestamp()),
        "expires_at": int(EXPIRES.timestamp()),
        "key_id": key_fingerprint(pair[1]),
    }
    # Independent check of the documented signature: Ed25519 over "jq1.<claims>".
    lic.load_public_key(pair[1]).verify(
        b64url_decode(signature), f"{prefix}.{body}".encode("ascii")
    )
    assert verify_licence(token, public_keys=[pair[1]], now=NOW) == Licence(
        edition=Edition.PRO,
        licensee="Zoë & Co",
        expires_at=EXPIRES,
        status=LicenceStatus.VALID,
    )


def test_issue__accepts_a_base64_seed(pair: tuple[str, str]) -> None:
    seed = load_private_key(pair[0]).private_bytes(
        serialization.Encoding.Raw,
        serialization.PrivateFormat.Raw,
        serialization.NoEncryption(),
    )
    token = issue_licence(base64.b64encode(seed).decode(), licensee="ACME", expires_at=EXPIRES)

    assert verify_licence(token, public_keys=[pair[1]], now=NOW).status == "valid"


def test_issue__aware_expiry_is_converted_to_utc(pair: tuple[str, str]) -> None:
    paris = datetime.fromisoformat("2028-01-01T00:59:59+01:00")
    token = issue_licence(pair[0], licensee="ACME", expires_at=paris)

    assert verify_licence(token, public_keys=[pair[1]], now=NOW).expires_at == EXPIRES


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"licensee": ""}, "licensee must be a non-empty string"),
        ({"licensee": "ACME", "edition": "enterprise"}, "edition must be 'pro'"),
    ],
)
def test_issue__rejects_bad_claims(
    pair: tuple[str, str], options: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        issue_licence(pair[0], expires_at=EXPIRES, **options)


def test_issue__rejects_a_bad_private_key() -> None:
    with pytest.raises(ValueError, match="private key must be PEM"):
        issue_licence("nope", licensee="ACME", expires_at=EXPIRES)


# --- describe_licence ---------------------------------------------------------------------


def test_describe__each_status(pair: tuple[str, str], token: str) -> None:
    trusted = [pair[1]]
    later = EXPIRES + timedelta(days=1)

    assert describe_licence(verify_licence(token, public_keys=trusted, now=NOW)) == (
        "Pro, licensed to ACME Ltd, valid until 2027-12-31 23:59:59 UTC."
    )
    assert describe_licence(verify_licence(token, public_keys=trusted, now=later)) == (
        "Core: the Pro licence of ACME Ltd expired at 2027-12-31 23:59:59 UTC; "
        "Pro features are off."
    )
    assert describe_licence(verify_licence(None)) == (
        "Core: no licence key is set (JOBQUEUE['LICENCE_KEY'])."
    )
    assert describe_licence(verify_licence("garbage")) == (
        "Core: the licence key is not a jq1.<claims>.<signature> token (malformed); "
        "Pro features are off."
    )


# --- command line -------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DJANGO_SETTINGS_MODULE", None)  # the CLI needs no settings
    return subprocess.run(
        [sys.executable, "-m", "django_jobqueue.licence", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
        check=False,
    )


def test_cli__keygen_issue_verify(tmp_path: Path) -> None:
    keygen = run_cli("keygen", "--out", str(tmp_path), "--name", "test")
    assert keygen.returncode == 0, keygen.stderr
    private, public = tmp_path / "test.key", tmp_path / "test.pub"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert f"key id:      {key_fingerprint(public.read_text())}" in keygen.stdout

    issue = run_cli(
        "issue", "--private-key", str(private), "--licensee", "ACME Ltd", "--expires", "2027-12-31"
    )
    assert issue.returncode == 0, issue.stderr
    token = issue.stdout.strip()
    assert verify_licence(token, public_keys=[public.read_text()], now=NOW) == Licence(
        edition=Edition.PRO,
        licensee="ACME Ltd",
        expires_at=EXPIRES,
        status=LicenceStatus.VALID,
    )

    verify = run_cli("verify", token, "--public-key", str(public))
    assert (verify.returncode, verify.stdout) == (
        0,
        "valid: Pro, licensed to ACME Ltd, valid until 2027-12-31 23:59:59 UTC.\n",
    )
    shipped = run_cli("verify", token)
    assert shipped.returncode == 1
    assert shipped.stdout.startswith("bad_signature: ")


def test_cli__keygen_refuses_to_overwrite(tmp_path: Path) -> None:
    assert run_cli("keygen", "--out", str(tmp_path)).returncode == 0
    before = (tmp_path / "vendor.key").read_text()

    again = run_cli("keygen", "--out", str(tmp_path))

    assert again.returncode == 1
    assert again.stderr.endswith(
        f"{tmp_path / 'vendor.key'} exists; pass --force to overwrite it.\n"
    )
    assert (tmp_path / "vendor.key").read_text() == before


def test_cli__issue_an_expired_key(tmp_path: Path) -> None:
    private_pem, public_pem = generate_key_pair()
    (tmp_path / "k.key").write_text(private_pem)

    issue = run_cli(
        "issue",
        "--private-key",
        str(tmp_path / "k.key"),
        "--licensee",
        "ACME",
        "--expires",
        "2020-01-01T00:00:00+00:00",
    )

    assert issue.returncode == 0, issue.stderr
    assert verify_licence(issue.stdout, public_keys=[public_pem]).status == "expired"


def test_cli__rejects_a_bad_expiry(tmp_path: Path) -> None:
    result = run_cli(
        "issue", "--private-key", str(tmp_path / "k.key"), "--licensee", "A", "--expires", "soon"
    )

    assert result.returncode == 2
    assert "'soon' is not YYYY-MM-DD or an ISO-8601 datetime" in result.stderr


# --- the project's licence (needs Django settings) ----------------------------------------


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
    from django_jobqueue.exceptions import ProRequired

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
