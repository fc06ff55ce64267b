"""The licence token: its claims and verdict, issuing it and verifying it offline.

A token is ``jq1.<base64url(claims JSON)>.<base64url(signature)>``, signed with
Ed25519 (see :mod:`django_jobqueue.store.licence` for the format). Pure: nothing here reads
Django settings or makes a network call.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from .keys import (
    b64url_decode,
    b64url_encode,
    key_fingerprint,
    load_private_key,
    load_public_key,
    shipped_public_keys,
)

__all__ = [
    "MAX_TOKEN_LENGTH",
    "TOKEN_PREFIX",
    "DecodedToken",
    "Edition",
    "Licence",
    "LicenceStatus",
    "as_utc",
    "decode_token",
    "describe_licence",
    "end_of",
    "issue_licence",
    "judge_token",
    "verify_licence",
]

#: First dot-separated part of every token; names the format version.
TOKEN_PREFIX = "jq1"  # noqa: S105 (a format tag, not a secret)

#: Longest token accepted; anything longer is malformed (claims are a few hundred bytes).
MAX_TOKEN_LENGTH = 4096

_ED25519_SIGNATURE_BYTES = 64


class Edition(enum.StrEnum):
    """The edition a licence puts in force."""

    #: No licence, or one that does not verify: every Core feature, no Pro feature.
    CORE = "core"
    #: A valid Pro licence.
    PRO = "pro"


class LicenceStatus(enum.StrEnum):
    """What :func:`verify_licence` made of a key; only ``VALID`` enables Pro."""

    #: No key is set (``None`` or blank).
    MISSING = "missing"
    #: The key verified and has not expired.
    VALID = "valid"
    #: The key is not a well-formed ``jq1`` token with well-formed claims.
    MALFORMED = "malformed"
    #: No trusted public key verifies the signature (tampered, or a foreign signer).
    BAD_SIGNATURE = "bad_signature"
    #: The key is authentic but its ``expires_at`` has passed.
    EXPIRED = "expired"


@dataclass(frozen=True, slots=True)
class Licence:
    """The outcome of verifying a licence key: the edition in force and why."""

    #: The edition in force: ``"pro"`` only when ``status`` is ``"valid"``.
    edition: Edition
    #: Who the key was issued to; set when the signature verified (valid or expired).
    licensee: str | None
    #: The last instant (aware, UTC) the key is valid; set with ``licensee``.
    expires_at: datetime | None
    #: One of :class:`LicenceStatus`.
    status: LicenceStatus
    #: One sentence on what is wrong with the key; ``None`` when valid or missing.
    problem: str | None = None

    @property
    def is_pro(self) -> bool:
        """Return whether this licence puts Pro in force."""
        return self.status is LicenceStatus.VALID


def as_utc(moment: datetime) -> datetime:
    """Return ``moment`` as an aware UTC datetime; a naive one is taken as UTC already."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def end_of(day: date | datetime) -> datetime:
    """Return ``day`` as an aware UTC datetime; a bare date means its last second, UTC."""
    if isinstance(day, datetime):
        return as_utc(day)
    return datetime.combine(day, time(23, 59, 59), tzinfo=UTC)


def issue_licence(
    private_key_pem_or_raw: str | bytes | Ed25519PrivateKey,
    *,
    licensee: str,
    edition: str = "pro",
    expires_at: datetime | date,
    key_id: str | None = None,
    issued_at: datetime | None = None,
) -> str:
    """Sign a licence key (for the vendor, and for tests with their own key pair).

    Parameters
    ----------
    private_key_pem_or_raw
        The signing key, in any encoding :func:`load_private_key` accepts.
    licensee
        Who the licence is for; a non-empty string.
    edition
        The edition granted; only ``"pro"`` exists.
    expires_at
        The last instant the key is valid. A naive datetime is taken as UTC; a
        :class:`~datetime.date` means 23:59:59 UTC that day. Stored in whole seconds. A
        past value is allowed (it issues an expired key, which tests need).
    key_id
        The ``key_id`` claim; ``None`` (the default) uses the fingerprint of the signing
        key (:func:`key_fingerprint`), which lets the verifier pick that key at once.
    issued_at
        The ``issued_at`` claim; ``None`` means now. Naive is taken as UTC.

    Returns
    -------
    str
        The token ``jq1.<base64url(claims)>.<base64url(signature)>``.

    Raises
    ------
    ValueError
        If the private key is unreadable, ``licensee`` is empty or ``edition`` is not
        ``"pro"``.

    Implements: docs/design.md#core-and-pro.
    """
    signer = load_private_key(private_key_pem_or_raw)
    if not isinstance(licensee, str) or not licensee.strip():
        raise ValueError(f"licensee must be a non-empty string: got {licensee!r}.")
    if edition != Edition.PRO:
        raise ValueError(f"edition must be 'pro': got {edition!r}.")
    issued = as_utc(issued_at) if issued_at is not None else datetime.now(UTC)
    claims: dict[str, Any] = {
        "licensee": licensee,
        "edition": str(edition),
        "issued_at": int(issued.timestamp()),
        "expires_at": int(end_of(expires_at).timestamp()),
        "key_id": key_id if key_id is not None else key_fingerprint(signer.public_key()),
    }
    body = json.dumps(claims, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    signed_part = f"{TOKEN_PREFIX}.{b64url_encode(body.encode('utf-8'))}"
    signature = signer.sign(signed_part.encode("ascii"))
    return f"{signed_part}.{b64url_encode(signature)}"


@dataclass(frozen=True, slots=True)
class DecodedToken:
    """A token after every time-independent step: structure, claims and signature.

    Made by :func:`decode_token`; :func:`judge_token` applies the clock to it.
    """

    #: ``valid`` here means "authentic"; expiry is judged later.
    status: LicenceStatus
    #: One sentence on what is wrong with the token, as in :attr:`Licence.problem`.
    problem: str | None = None
    #: The ``licensee`` claim, once the signature verified.
    licensee: str | None = None
    #: The ``expires_at`` claim (aware, UTC), once the signature verified.
    expires_at: datetime | None = None


_MISSING = DecodedToken(LicenceStatus.MISSING)


def _malformed(problem: str) -> DecodedToken:
    return DecodedToken(LicenceStatus.MALFORMED, problem)


def _timestamp(claims: dict[str, Any], name: str) -> datetime | None:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _decode(key: str, public_keys: Sequence[Ed25519PublicKey]) -> DecodedToken:
    """Check a stripped non-blank token's structure, claims and signature (not its expiry)."""
    if len(key) > MAX_TOKEN_LENGTH:
        return _malformed(f"the licence key is longer than {MAX_TOKEN_LENGTH} characters")
    parts = key.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        return _malformed(f"the licence key is not a {TOKEN_PREFIX}.<claims>.<signature> token")
    try:
        body = b64url_decode(parts[1])
        signature = b64url_decode(parts[2])
    except ValueError:
        return _malformed("the licence key is not valid base64url")
    if len(signature) != _ED25519_SIGNATURE_BYTES:
        return _malformed("the licence key's signature is not 64 bytes")
    try:
        claims = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _malformed("the licence key's claims are not JSON")
    if not isinstance(claims, dict):
        return _malformed("the licence key's claims are not a JSON object")
    licensee = claims.get("licensee")
    if not isinstance(licensee, str) or not licensee.strip():
        return _malformed("the licence key's licensee is not a non-empty string")
    if claims.get("edition") != Edition.PRO:
        return _malformed("the licence key's edition is not 'pro'")
    expires_at = _timestamp(claims, "expires_at")
    if expires_at is None or _timestamp(claims, "issued_at") is None:
        return _malformed("the licence key's issued_at or expires_at is not unix seconds")
    key_id = claims.get("key_id")
    if key_id is not None and not isinstance(key_id, str):
        return _malformed("the licence key's key_id is not a string")
    candidates = [k for k in public_keys if key_id is None or key_fingerprint(k) == key_id]
    signed_part = f"{parts[0]}.{parts[1]}".encode("ascii")
    for public_key in candidates:
        try:
            public_key.verify(signature, signed_part)
        except InvalidSignature:
            continue
        return DecodedToken(LicenceStatus.VALID, None, licensee, expires_at)
    if not candidates:
        problem = f"the licence key was signed by key {key_id}, which is not trusted"
    else:
        problem = "the licence key's signature does not verify with any trusted public key"
    return DecodedToken(LicenceStatus.BAD_SIGNATURE, problem)


def decode_token(key: Any, public_keys: Sequence[Ed25519PublicKey]) -> DecodedToken:
    """Check a token's structure, claims and signature against ``public_keys``.

    Pure, and never raises on a bad token; the clock is applied by :func:`judge_token`.

    Parameters
    ----------
    key
        The token; ``None``, ``""`` or whitespace means no key (status ``missing``).
        Surrounding whitespace is ignored; anything but a string is ``malformed``.
    public_keys
        The trusted public keys, already loaded.

    Returns
    -------
    DecodedToken
        Status ``missing``, ``malformed``, ``bad_signature`` or ``valid`` (authentic).
    """
    if key is None or (isinstance(key, str) and not key.strip()):
        return _MISSING
    if not isinstance(key, str):
        return _malformed("the licence key is not a string")
    return _decode(key.strip(), public_keys)


def judge_token(decoded: DecodedToken, now: datetime | None) -> Licence:
    """Apply the clock to a decoded token and say which edition it puts in force.

    Parameters
    ----------
    decoded
        A verdict of :func:`decode_token`.
    now
        The instant to judge expiry at; ``None`` means now. Naive is taken as UTC.

    Returns
    -------
    Licence
        ``expired`` if an authentic token's ``expires_at`` is before ``now``; else the
        decoded status. Only ``valid`` has ``edition == "pro"``.
    """
    status, problem = decoded.status, decoded.problem
    if status is LicenceStatus.VALID and decoded.expires_at is not None:
        moment = datetime.now(UTC) if now is None else as_utc(now)
        if moment > decoded.expires_at:
            status = LicenceStatus.EXPIRED
            problem = f"the licence key expired at {decoded.expires_at.isoformat()}"
    return Licence(
        edition=Edition.PRO if status is LicenceStatus.VALID else Edition.CORE,
        licensee=decoded.licensee,
        expires_at=decoded.expires_at,
        status=status,
        problem=problem,
    )


def verify_licence(
    key: str | None,
    *,
    public_keys: Sequence[str | bytes | Ed25519PublicKey] | None = None,
    now: datetime | None = None,
) -> Licence:
    """Verify a licence key offline and say which edition it puts in force.

    Pure: reads no setting, makes no network call, and never raises on a bad key.

    Parameters
    ----------
    key
        The token; ``None``, ``""`` or whitespace means no key. Surrounding whitespace
        (a newline from an environment file) is ignored.
    public_keys
        The trusted public keys (any encoding :func:`load_public_key` accepts);
        ``None`` trusts the shipped ones only (:func:`shipped_public_keys`).
    now
        The instant to judge expiry at; ``None`` means now. Naive is taken as UTC.

    Returns
    -------
    Licence
        ``status`` is ``"missing"``, ``"malformed"``, ``"bad_signature"``,
        ``"expired"`` or ``"valid"``; only ``"valid"`` has ``edition == "pro"``.

    Raises
    ------
    ValueError
        If an entry of ``public_keys`` is not an Ed25519 public key (a programming
        error; a bad ``key`` never raises).

    Implements: docs/design.md#core-and-pro.
    """
    trusted = (
        shipped_public_keys()
        if public_keys is None
        else tuple(load_public_key(k) for k in public_keys)
    )
    return judge_token(decode_token(key, trusted), now)


def describe_licence(licence: Licence) -> str:
    """Say in one sentence which edition is in force and until when.

    Used by ``manage.py jobqueue licence``.

    Parameters
    ----------
    licence
        A verdict of :func:`verify_licence` or :func:`current_licence`.

    Returns
    -------
    str
        One line, e.g. ``"Pro, licensed to ACME Ltd, valid until 2027-12-31 23:59:59
        UTC."`` or ``"Core: no licence key is set (JOBQUEUE['LICENCE_KEY'])."``.

    Implements: docs/design.md#core-and-pro.
    """
    until = (
        licence.expires_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        if licence.expires_at is not None
        else ""
    )
    if licence.status is LicenceStatus.VALID:
        return f"Pro, licensed to {licence.licensee}, valid until {until}."
    if licence.status is LicenceStatus.MISSING:
        return "Core: no licence key is set (JOBQUEUE['LICENCE_KEY'])."
    if licence.status is LicenceStatus.EXPIRED:
        return (
            f"Core: the Pro licence of {licence.licensee} expired at {until}; Pro features are off."
        )
    return f"Core: {licence.problem} ({licence.status}); Pro features are off."
