"""The licence: which edition (Core or Pro) is in force, verified offline.

Policy
------
Every Core feature works without a key. Pro features (docs/design.md#core-and-pro: the
``until_executing``
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
``python -m django_jobqueue.store.licence issue``; see ``docs/licence.md``.

Parts: ``keys`` (loading, fingerprints, new pairs, the shipped keys), ``token`` (the
token's claims, issuing, verifying, the :class:`Licence` verdict), ``gate`` (the
project's licence from settings, :func:`require_pro`, the system check) and ``cli``
(``python -m django_jobqueue.store.licence``). Import from this package, not from its parts.
"""

from __future__ import annotations

from .cli import main
from .gate import check_licence, current_licence, is_pro, require_pro
from .keys import (
    generate_key_pair,
    key_fingerprint,
    load_private_key,
    load_public_key,
    shipped_public_keys,
)
from .token import (
    MAX_TOKEN_LENGTH,
    TOKEN_PREFIX,
    Edition,
    Licence,
    LicenceStatus,
    describe_licence,
    issue_licence,
    verify_licence,
)

__all__ = [
    "MAX_TOKEN_LENGTH",
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
