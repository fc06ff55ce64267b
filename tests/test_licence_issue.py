"""Tests of the licence (the Pro gate, docs/design.md#core-and-pro): issue_licence,
describe_licence, and the command line (keygen, issue, verify).

Every test makes its own Ed25519 key pairs; none makes a network call.
"""

from __future__ import annotations

import base64
import json
import os
import stat
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from django_jobqueue.store import licence as lic
from django_jobqueue.store.licence import (
    Edition,
    Licence,
    LicenceStatus,
    describe_licence,
    generate_key_pair,
    issue_licence,
    key_fingerprint,
    load_private_key,
    verify_licence,
)
from tests import licence_helpers
from tests.licence_helpers import EXPIRES, NOW, REPO, b64url_decode

#: The shared fixtures (tests/licence_helpers.py), found by the tests under these names.
pair = licence_helpers.pair
token = licence_helpers.token


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
        [sys.executable, "-m", "django_jobqueue.store.licence", *args],
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
