"""Licence signing keys: Ed25519 key loading, fingerprints, new pairs, the shipped keys.

Keys are read from PEM or from base64 of their 32 raw bytes; the vendor public keys
shipped with the package live in ``django_jobqueue/licence_keys/*.pub``. Nothing here
reads Django settings.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import re
from importlib import resources

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

__all__ = [
    "b64url_decode",
    "b64url_encode",
    "generate_key_pair",
    "key_fingerprint",
    "load_private_key",
    "load_public_key",
    "shipped_public_keys",
]

_ED25519_KEY_BYTES = 32
_BASE64URL = re.compile(r"[A-Za-z0-9_-]+")


def b64url_encode(data: bytes) -> str:
    """Encode ``data`` as unpadded base64url (RFC 4648 section 5 without ``=``).

    Parameters
    ----------
    data
        The bytes to encode.

    Returns
    -------
    str
        ASCII text over ``A-Z a-z 0-9 - _``.
    """
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Decode canonical unpadded base64url, the inverse of :func:`b64url_encode`.

    Parameters
    ----------
    text
        Unpadded base64url text, spelled as :func:`b64url_encode` spells it.

    Returns
    -------
    bytes
        The decoded bytes.

    Raises
    ------
    ValueError
        If ``text`` is not canonical unpadded base64url (padding, other characters,
        unused trailing bits set).
    """
    if not _BASE64URL.fullmatch(text):
        raise ValueError("not base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except binascii.Error as exc:
        raise ValueError("not base64url") from exc
    if b64url_encode(data) != text:  # unused trailing bits: one value, one spelling
        raise ValueError("not canonical base64url")
    return data


def _decode_raw_key(text: str) -> bytes:
    """Decode base64 (standard or URL-safe, padding optional) of a raw 32-byte key."""
    compact = "".join(text.split()).rstrip("=")
    compact = compact.replace("+", "-").replace("/", "_")
    data = b64url_decode(compact)
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

    Implements: docs/design.md#core-and-pro.
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

    Implements: docs/design.md#core-and-pro.
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

    Implements: docs/design.md#core-and-pro.
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

    Implements: docs/design.md#core-and-pro.
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

    Implements: docs/design.md#core-and-pro.
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
