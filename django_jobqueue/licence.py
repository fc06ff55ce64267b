"""The licence: which edition (Core or Pro) is in force, verified offline.

Policy
------
Every Core feature works without a key. Pro features (seed 000: the ``until_executing``
and ``until_executed`` unique modes, the console's Pro routes, ...) need a licence key in
``JOBQUEUE["LICENCE_KEY"]``. A key is a token signed with Ed25519 by the vendor::

    jq1.<base64url(claims JSON)>.<base64url(signature)>

``jq1`` names the format version; base64url is RFC 4648 section 5 without ``=``
padding; the claims are a JSON object with ``licensee`` (a non-empty string),
``edition`` (``"pro"``), ``issued_at`` and ``expires_at`` (integer unix seconds, UTC)
and an optional ``key_id`` (the fingerprint of the signing key, see
:func:`key_fingerprint`). The signature is Ed25519 over the exact ASCII bytes of
``jq1.<base64url(claims JSON)>``, i.e. everything before the last dot. A key is valid
while ``now <= expires_at``.

The signature is checked against the public keys shipped in ``licence_keys/*.pub`` plus
the ones in ``JOBQUEUE["LICENCE_PUBLIC_KEYS"]`` (PEM or base64 of the 32 raw bytes).
A missing, malformed, wrongly signed or expired key never stops the project: it runs as
Core, and the system check ``django_jobqueue.W010`` warns about the last three. No
licence check makes a network call.

Vendors (and tests, with their own key pair) issue keys with :func:`issue_licence` or
``python -m django_jobqueue.licence issue``; see ``docs/licence.md``.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import enum
import functools
import hashlib
import json
import logging
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from importlib import resources
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)
from django.core.checks import CheckMessage
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

__all__ = [
    "TOKEN_PREFIX",
    "Edition",
    "Licence",
    "LicenceStatus",
    "check_licence",
    "current_licence",
    "describe_licence",
    "generate_key_pair",
    "is_pro",
    "issue_licence",
    "key_fingerprint",
    "load_private_key",
    "load_public_key",
    "main",
    "require_pro",
    "shipped_public_keys",
    "verify_licence",
]

logger = logging.getLogger(__name__)

#: First dot-separated part of every token; names the format version.
TOKEN_PREFIX = "jq1"  # noqa: S105 (a format tag, not a secret)

#: Longest token accepted; anything longer is malformed (claims are a few hundred bytes).
MAX_TOKEN_LENGTH = 4096

_ED25519_SIGNATURE_BYTES = 64
_ED25519_KEY_BYTES = 32
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


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


# --- keys -------------------------------------------------------------------------------


def _b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64url_decode(text: str) -> bytes:
    """Decode canonical unpadded base64url, raising ``ValueError`` on anything else."""
    if not _BASE64URL.fullmatch(text):
        raise ValueError("not base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError("not base64url") from exc
    if _b64url_encode(data) != text:  # unused trailing bits: one value, one spelling
        raise ValueError("not canonical base64url")
    return data


def _decode_raw_key(text: str) -> bytes:
    """Decode base64 (standard or URL-safe, padding optional) of a raw 32-byte key."""
    compact = "".join(text.split()).rstrip("=")
    compact = compact.replace("+", "-").replace("/", "_")
    data = _b64url_decode(compact)
    if len(data) != _ED25519_KEY_BYTES:
        raise ValueError("a raw Ed25519 key is 32 bytes")
    return data


def load_public_key(data: str | bytes | Ed25519PublicKey) -> Ed25519PublicKey:
    """Load an Ed25519 public key from PEM or from base64 of its 32 raw bytes.

    Parameters
    ----------
    data
        A PEM ``PUBLIC KEY`` block (SubjectPublicKeyInfo), base64 (standard or URL-safe,
        padding optional) of the 32 raw key bytes, the 32 raw bytes themselves, or a key.

    Returns
    -------
    Ed25519PublicKey
        The key.

    Raises
    ------
    ValueError
        If ``data`` is not an Ed25519 public key in one of these encodings.

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    if isinstance(data, Ed25519PublicKey):
        return data
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if raw.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(raw)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"Unreadable PEM public key: {exc}.") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise ValueError("The PEM public key is not an Ed25519 key.")
        return key
    if len(raw) != _ED25519_KEY_BYTES:
        try:
            raw = _decode_raw_key(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError("A public key must be PEM or base64 of 32 raw Ed25519 bytes.") from exc
    return Ed25519PublicKey.from_public_bytes(raw)


def load_private_key(data: str | bytes | Ed25519PrivateKey) -> Ed25519PrivateKey:
    """Load an Ed25519 private key from PEM (PKCS#8) or from base64 of its 32-byte seed.

    Parameters
    ----------
    data
        An unencrypted PEM ``PRIVATE KEY`` block, base64 (standard or URL-safe, padding
        optional) of the 32-byte seed, the 32 raw bytes themselves, or a key.

    Returns
    -------
    Ed25519PrivateKey
        The key.

    Raises
    ------
    ValueError
        If ``data`` is not an unencrypted Ed25519 private key in one of these encodings.

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    if isinstance(data, Ed25519PrivateKey):
        return data
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    if raw.lstrip().startswith(b"-----BEGIN"):
        try:
            key = serialization.load_pem_private_key(raw, password=None)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"Unreadable PEM private key: {exc}.") from exc
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("The PEM private key is not an Ed25519 key.")
        return key
    if len(raw) != _ED25519_KEY_BYTES:
        try:
            raw = _decode_raw_key(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ValueError(
                "A private key must be PEM or base64 of a 32-byte Ed25519 seed."
            ) from exc
    return Ed25519PrivateKey.from_private_bytes(raw)


def key_fingerprint(public_key: str | bytes | Ed25519PublicKey) -> str:
    """Return a key's id: the first 16 hex digits of SHA-256 over its 32 raw bytes.

    Parameters
    ----------
    public_key
        An Ed25519 public key in any encoding :func:`load_public_key` accepts.

    Returns
    -------
    str
        16 lowercase hex digits; a token's ``key_id`` claim holds this value.

    Raises
    ------
    ValueError
        If ``public_key`` is not an Ed25519 public key.

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    raw = load_public_key(public_key).public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    return hashlib.sha256(raw).hexdigest()[:16]


@functools.cache
def shipped_public_keys() -> tuple[Ed25519PublicKey, ...]:
    """Return the vendor public keys shipped in ``django_jobqueue/licence_keys/*.pub``.

    Returns
    -------
    tuple of Ed25519PublicKey
        The keys, in file name order; read once per process.

    Raises
    ------
    ValueError
        If a shipped file is not an Ed25519 public key (a packaging error).

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    folder = resources.files("django_jobqueue").joinpath("licence_keys")
    if not folder.is_dir():
        return ()
    entries = sorted(
        (entry for entry in folder.iterdir() if entry.name.endswith(".pub")),
        key=lambda entry: entry.name,
    )
    return tuple(load_public_key(entry.read_bytes()) for entry in entries)


def generate_key_pair() -> tuple[str, str]:
    """Make a new Ed25519 key pair for signing licences (vendors, tests).

    Returns
    -------
    tuple of (str, str)
        The private key as unencrypted PKCS#8 PEM, and the public key as
        SubjectPublicKeyInfo PEM. Keep the first secret.

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    private_key = Ed25519PrivateKey.generate()
    private_pem = private_key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode("ascii")
    public_pem = (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode("ascii")
    )
    return private_pem, public_pem


# --- issuing and verifying ------------------------------------------------------------------


def _as_utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _end_of(day: date | datetime) -> datetime:
    """Return ``day`` as an aware UTC datetime; a bare date means its last second, UTC."""
    if isinstance(day, datetime):
        return _as_utc(day)
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

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    signer = load_private_key(private_key_pem_or_raw)
    if not isinstance(licensee, str) or not licensee.strip():
        raise ValueError(f"licensee must be a non-empty string: got {licensee!r}.")
    if edition != Edition.PRO:
        raise ValueError(f"edition must be 'pro': got {edition!r}.")
    issued = _as_utc(issued_at) if issued_at is not None else datetime.now(UTC)
    claims: dict[str, Any] = {
        "licensee": licensee,
        "edition": str(edition),
        "issued_at": int(issued.timestamp()),
        "expires_at": int(_end_of(expires_at).timestamp()),
        "key_id": key_id if key_id is not None else key_fingerprint(signer.public_key()),
    }
    body = json.dumps(claims, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    signed_part = f"{TOKEN_PREFIX}.{_b64url_encode(body.encode('utf-8'))}"
    signature = signer.sign(signed_part.encode("ascii"))
    return f"{signed_part}.{_b64url_encode(signature)}"


@dataclass(frozen=True, slots=True)
class _Decoded:
    """A token after every time-independent step: structure, claims and signature."""

    status: LicenceStatus
    problem: str | None = None
    licensee: str | None = None
    expires_at: datetime | None = None


def _malformed(problem: str) -> _Decoded:
    return _Decoded(LicenceStatus.MALFORMED, problem)


def _timestamp(claims: dict[str, Any], name: str) -> datetime | None:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None


def _decode(key: str, public_keys: Sequence[Ed25519PublicKey]) -> _Decoded:
    """Check a non-blank token's structure, claims and signature (not its expiry)."""
    if len(key) > MAX_TOKEN_LENGTH:
        return _malformed(f"the licence key is longer than {MAX_TOKEN_LENGTH} characters")
    parts = key.split(".")
    if len(parts) != 3 or parts[0] != TOKEN_PREFIX:
        return _malformed(f"the licence key is not a {TOKEN_PREFIX}.<claims>.<signature> token")
    try:
        body = _b64url_decode(parts[1])
        signature = _b64url_decode(parts[2])
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
        return _Decoded(LicenceStatus.VALID, None, licensee, expires_at)
    if not candidates:
        problem = f"the licence key was signed by key {key_id}, which is not trusted"
    else:
        problem = "the licence key's signature does not verify with any trusted public key"
    return _Decoded(LicenceStatus.BAD_SIGNATURE, problem)


def _finish(decoded: _Decoded, now: datetime | None) -> Licence:
    """Apply the clock to a decoded token."""
    status, problem = decoded.status, decoded.problem
    if status is LicenceStatus.VALID and decoded.expires_at is not None:
        moment = datetime.now(UTC) if now is None else _as_utc(now)
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


_MISSING = _Decoded(LicenceStatus.MISSING)


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

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    trusted = (
        shipped_public_keys()
        if public_keys is None
        else tuple(load_public_key(k) for k in public_keys)
    )
    if key is None or (isinstance(key, str) and not key.strip()):
        decoded = _MISSING
    elif not isinstance(key, str):
        decoded = _malformed("the licence key is not a string")
    else:
        decoded = _decode(key.strip(), trusted)
    return _finish(decoded, now)


# --- the project's licence ---------------------------------------------------------------


def _load_extra_keys(entries: Sequence[str]) -> tuple[tuple[Ed25519PublicKey, ...], list[str]]:
    """Load ``LICENCE_PUBLIC_KEYS``; return the usable keys and one problem per bad entry."""
    keys: list[Ed25519PublicKey] = []
    problems: list[str] = []
    for index, entry in enumerate(entries):
        try:
            keys.append(load_public_key(entry))
        except (TypeError, ValueError) as exc:
            problems.append(f"JOBQUEUE['LICENCE_PUBLIC_KEYS'][{index}] is unusable: {exc}")
    return tuple(keys), problems


@functools.lru_cache(maxsize=16)
def _decode_cached(key: str, extra_public_keys: tuple[str, ...]) -> _Decoded:
    extra, problems = _load_extra_keys(extra_public_keys)
    for problem in problems:
        logger.warning("Ignoring a licence public key: %s", problem)
    if not key.strip():
        return _MISSING
    decoded = _decode(key.strip(), shipped_public_keys() + extra)
    logger.debug("Licence key decoded: %s", decoded.status)
    return decoded


@receiver(setting_changed)
def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting == "JOBQUEUE":
        _decode_cached.cache_clear()


def current_licence() -> Licence:
    """Return the licence in force for this project, from ``JOBQUEUE["LICENCE_KEY"]``.

    The signature check is cached per (key, extra public keys); expiry is judged on
    every call, so a long-running worker drops to Core when its key expires.

    Returns
    -------
    Licence
        The verdict of :func:`verify_licence` over the shipped public keys plus the
        usable entries of ``JOBQUEUE["LICENCE_PUBLIC_KEYS"]`` (unusable ones are
        skipped, logged and reported by :func:`check_licence`).

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If the ``JOBQUEUE`` setting itself is invalid (see ``django_jobqueue.conf``).

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    from django_jobqueue.conf import get_config  # conf reads settings: import late

    config = get_config()
    return _finish(_decode_cached(config.LICENCE_KEY, tuple(config.LICENCE_PUBLIC_KEYS)), None)


def is_pro() -> bool:
    """Return whether a valid Pro licence is in force for this project.

    Returns
    -------
    bool
        ``True`` only when :func:`current_licence` is ``"valid"``.

    Raises
    ------
    ImproperlyConfiguredJobQueue
        If the ``JOBQUEUE`` setting itself is invalid.

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    return current_licence().is_pro


def require_pro(feature: str) -> None:
    """Raise unless a valid Pro licence is in force.

    Parameters
    ----------
    feature
        What the caller asked for, as a user would name it, e.g.
        ``"unique_mode 'until_executed'"``; it starts the error message.

    Raises
    ------
    ProRequired
        If :func:`current_licence` is not ``"valid"`` (the gateway answers 402
        ``pro_required``).
    ImproperlyConfiguredJobQueue
        If the ``JOBQUEUE`` setting itself is invalid.

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    licence = current_licence()
    if licence.is_pro:
        return
    from django_jobqueue.exceptions import ProRequired  # import late: no cycle

    reason = "no licence key is set" if licence.problem is None else licence.problem
    raise ProRequired(
        f"{feature} needs a Pro licence, but {reason}; set JOBQUEUE['LICENCE_KEY'] "
        "to a valid Pro key, or use a Core feature instead."
    )


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

    Implements: seed 000, "Pro" gate / issue 5 item 4.
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


def check_licence(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when a licence key is set but does not put Pro in force.

    A missing key is not a warning: Core is a complete product. Register it with
    ``django.core.checks.register`` (``checks.py`` does).

    Parameters
    ----------
    app_configs
        Passed by the check framework; unused (the licence is project-wide).
    **kwargs
        Passed by the check framework; unused.

    Returns
    -------
    list of CheckMessage
        ``django_jobqueue.W010`` if the key is malformed, wrongly signed or expired,
        and one ``django_jobqueue.W011`` per unusable ``LICENCE_PUBLIC_KEYS`` entry;
        nothing if ``JOBQUEUE`` itself is invalid (``conf``'s checks report that).

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    from django_jobqueue.conf import get_config  # conf reads settings: import late

    try:
        config = get_config()
    except ImproperlyConfigured:
        return []
    messages: list[CheckMessage] = [
        CheckWarning(
            problem,
            hint="Use a PEM public key or base64 of its 32 raw Ed25519 bytes.",
            id="django_jobqueue.W011",
        )
        for problem in _load_extra_keys(config.LICENCE_PUBLIC_KEYS)[1]
    ]
    licence = current_licence()
    if licence.status in {
        LicenceStatus.MALFORMED,
        LicenceStatus.BAD_SIGNATURE,
        LicenceStatus.EXPIRED,
    }:
        messages.append(
            CheckWarning(
                f"JOBQUEUE['LICENCE_KEY'] does not enable Pro: {licence.problem} "
                f"({licence.status}); the project runs as Core.",
                hint="Set JOBQUEUE['LICENCE_KEY'] to a current Pro key from your vendor, "
                "or remove it to run as Core without this warning.",
                id="django_jobqueue.W010",
            )
        )
    return messages


# --- command line ----------------------------------------------------------------------------


def _parse_expires(text: str) -> datetime:
    """Parse ``--expires``: ``YYYY-MM-DD`` (23:59:59 UTC that day) or an ISO datetime."""
    try:
        if len(text) == len("YYYY-MM-DD"):
            return _end_of(date.fromisoformat(text))
        return _as_utc(datetime.fromisoformat(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not YYYY-MM-DD or an ISO-8601 datetime"
        ) from exc


def _write_new(path: Path, text: str, *, mode: int, force: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if force else os.O_EXCL)
    fd = os.open(path, flags, mode)
    with os.fdopen(fd, "w", encoding="ascii") as handle:
        handle.write(text)
    os.chmod(path, mode)


def _cmd_keygen(args: argparse.Namespace) -> int:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    private_pem, public_pem = generate_key_pair()
    private_path, public_path = out / f"{args.name}.key", out / f"{args.name}.pub"
    try:
        _write_new(private_path, private_pem, mode=0o600, force=args.force)
        _write_new(public_path, public_pem, mode=0o644, force=args.force)
    except FileExistsError as exc:
        sys.stderr.write(f"{exc.filename} exists; pass --force to overwrite it.\n")
        return 1
    sys.stdout.write(
        f"private key: {private_path} (keep it secret)\n"
        f"public key:  {public_path}\n"
        f"key id:      {key_fingerprint(public_pem)}\n"
    )
    return 0


def _cmd_issue(args: argparse.Namespace) -> int:
    try:
        token = issue_licence(
            Path(args.private_key).read_bytes(),
            licensee=args.licensee,
            edition=args.edition,
            expires_at=args.expires,
            key_id=args.key_id,
        )
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"Cannot issue a licence: {exc}\n")
        return 1
    sys.stdout.write(token + "\n")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    key = sys.stdin.read() if args.key == "-" else args.key
    try:
        public_keys = [Path(p).read_bytes() for p in args.public_key] if args.public_key else None
        licence = verify_licence(key, public_keys=public_keys)
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"Cannot verify: {exc}\n")
        return 2
    sys.stdout.write(f"{licence.status}: {describe_licence(licence)}\n")
    return 0 if licence.is_pro else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``python -m django_jobqueue.licence``: ``keygen``, ``issue`` or ``verify``.

    Needs no Django settings and makes no network call.

    Parameters
    ----------
    argv
        The arguments after the program name; ``None`` means ``sys.argv[1:]``.

    Returns
    -------
    int
        The exit status: 0 on success; 1 if a file exists (``keygen``), the key cannot
        be issued (``issue``) or does not put Pro in force (``verify``); 2 on bad usage.

    Implements: seed 000, "Pro" gate / issue 5 item 4.
    """
    parser = argparse.ArgumentParser(
        prog="python -m django_jobqueue.licence",
        description="Make signing keys, issue and verify django-jobqueue licence keys.",
    )
    commands = parser.add_subparsers(dest="command", required=True)

    keygen = commands.add_parser("keygen", help="make an Ed25519 key pair (NAME.key, NAME.pub)")
    keygen.add_argument("--out", type=Path, required=True, help="folder to write the pair to")
    keygen.add_argument("--name", default="vendor", help="file stem (default: %(default)r)")
    keygen.add_argument("--force", action="store_true", help="overwrite existing files")
    keygen.set_defaults(handler=_cmd_keygen)

    issue = commands.add_parser("issue", help="sign a licence key and print it")
    issue.add_argument("--private-key", required=True, help="PEM or base64 private key file")
    issue.add_argument("--licensee", required=True, help="who the licence is for")
    issue.add_argument(
        "--expires",
        required=True,
        type=_parse_expires,
        help="last valid day YYYY-MM-DD (until 23:59:59 UTC) or an ISO-8601 datetime",
    )
    issue.add_argument("--edition", default="pro", choices=["pro"], help="(default: %(default)r)")
    issue.add_argument(
        "--key-id", default=None, help="key_id claim (default: the signing key's fingerprint)"
    )
    issue.set_defaults(handler=_cmd_issue)

    verify = commands.add_parser("verify", help="verify a licence key offline")
    verify.add_argument("key", help="the licence key, or - to read it from stdin")
    verify.add_argument(
        "--public-key",
        action="append",
        default=[],
        help="trust this public key file instead of the shipped ones (repeatable)",
    )
    verify.set_defaults(handler=_cmd_verify)

    args = parser.parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
