"""API tokens of the HTTP SDK gateway: issue, authenticate, allow, revoke.

A token is ``jqt_`` followed by 43 characters: 32 random bytes in base64url. Only the
SHA-256 of those characters is stored (:class:`~django_jobqueue.models.ApiToken`),
with their first :data:`PREFIX_LENGTH` characters as ``prefix``: a presented token is
looked up by its prefix and its hash compared with :func:`hmac.compare_digest`, so
neither the lookup nor the comparison tells an attacker how much of a guess was right.

Queues: a token lists exact queue names and ``prefix*`` patterns (``*`` alone: every
queue). Scopes: ``produce``, ``work``, ``read``; ``admin`` grants all of them and the
operators' routes (retry, bulk, unique locks).

The admin (``django_jobqueue.admin.tokens``), ``manage.py jobqueue token`` and the
gateway all call these functions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from ..core.exceptions import InvalidOption
from ..models import API_SCOPES, ApiToken

__all__ = [
    "PREFIX_LENGTH",
    "TOKEN_MARK",
    "authenticate",
    "is_live",
    "check_queue_patterns",
    "check_scopes",
    "has_scope",
    "issue_token",
    "queue_allowed",
    "revoke_token",
]

#: What every token starts with, so secret scanners and people can recognise one.
TOKEN_MARK = "jqt_"  # noqa: S105 (a marker, not a secret)
#: Characters of the secret stored in clear as the lookup key.
PREFIX_LENGTH = 12
_SECRET_CHARS = 43  # base64url of 32 bytes, without padding
#: ``last_used_at`` is written when older than this.
LAST_USED_EVERY = timedelta(minutes=1)


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def check_scopes(scopes: Iterable[Any]) -> list[str]:
    """Return ``scopes`` as a sorted list of known scopes, without repeats.

    Raises
    ------
    InvalidOption
        If a scope is not one of ``produce``, ``work``, ``read``, ``admin``, or none
        is given.
    """
    chosen = sorted(set(scopes))
    unknown = [scope for scope in chosen if scope not in API_SCOPES]
    if unknown or not chosen:
        raise InvalidOption(
            f"scopes must be some of {', '.join(API_SCOPES)}: got {unknown or 'none'}."
        )
    return chosen


def check_queue_patterns(queues: Iterable[Any]) -> list[str]:
    """Return the allowed-queue patterns ``queues`` as a list, checked.

    Each is a queue name (1 to 100 characters, exact) or ends with ``*`` (every
    queue whose name starts with what precedes it; ``*`` alone: every queue).

    Raises
    ------
    InvalidOption
        If a pattern is not a string of 1 to 101 characters, or none is given.
    """
    patterns = list(dict.fromkeys(queues))
    bad = [q for q in patterns if not isinstance(q, str) or not 0 < len(q) <= 101]
    if bad or not patterns:
        raise InvalidOption(
            f"queues must be queue names or 'prefix*' patterns ('*': every queue): got "
            f"{bad or 'none'}."
        )
    return patterns


def issue_token(
    name: str,
    *,
    queues: Sequence[str],
    scopes: Sequence[str],
    expires_at: datetime | None = None,
    using: str | None = None,
) -> tuple[ApiToken, str]:
    """Make a token and return (its row, the token text). The text is never stored.

    Parameters
    ----------
    name:
        A label for people, 1 to 200 characters.
    queues:
        Allowed queues: exact names and ``prefix*`` patterns; ``["*"]``: every queue.
    scopes:
        Some of ``produce``, ``work``, ``read``, ``admin``.
    expires_at:
        An aware datetime after which the token is refused; None: never.
    using:
        Database alias; None: the router's.

    Raises
    ------
    InvalidOption
        If an argument is invalid.
    """
    if not isinstance(name, str) or not 0 < len(name) <= 200:
        raise InvalidOption(f"name must be 1 to 200 characters: got {name!r}.")
    if expires_at is not None and timezone.is_naive(expires_at):
        raise InvalidOption("expires_at must be an aware datetime.")
    fields = {
        "name": name,
        "queues": check_queue_patterns(queues),
        "scopes": check_scopes(scopes),
        "expires_at": expires_at,
    }
    manager = ApiToken.objects.db_manager(using)
    for _attempt in range(5):  # a prefix collision (72 random bits) is all but impossible
        secret = secrets.token_urlsafe(32)
        while secret.startswith("-"):
            # A prefix is typed as an argument (`jobqueue token revoke PREFIX`), where
            # a leading "-" reads as an option: one draw in 64, drawn again.
            secret = secrets.token_urlsafe(32)
        try:
            with transaction.atomic(using=manager.db):
                row = manager.create(
                    prefix=secret[:PREFIX_LENGTH], key_hash=_hash(secret), **fields
                )
        except IntegrityError:
            continue
        return row, TOKEN_MARK + secret
    raise RuntimeError("could not make a token with a fresh prefix")  # pragma: no cover


def authenticate(text: str, *, using: str | None = None) -> ApiToken | None:
    """Return the live token whose text is ``text``, or None.

    None when the text is malformed, unknown, wrong, revoked or expired. Updates
    ``last_used_at`` when it is older than a minute (one write a minute per token).
    """
    if not isinstance(text, str) or not text.startswith(TOKEN_MARK):
        return None
    secret = text[len(TOKEN_MARK) :]
    if len(secret) != _SECRET_CHARS or not secret.isascii():
        return None
    row = ApiToken.objects.using(using).filter(prefix=secret[:PREFIX_LENGTH]).first()
    if row is None or not hmac.compare_digest(row.key_hash, _hash(secret)):
        return None
    now = timezone.now()
    if not is_live(row, now):
        return None
    if row.last_used_at is None or now - row.last_used_at >= LAST_USED_EVERY:
        stale = Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_EVERY)
        ApiToken.objects.using(row._state.db).filter(stale, pk=row.pk).update(last_used_at=now)
        row.last_used_at = now
    return row


def is_live(token: ApiToken, now: datetime | None = None) -> bool:
    """Whether ``token`` is neither revoked nor expired at ``now`` (default: now)."""
    if token.revoked_at is not None:
        return False
    return token.expires_at is None or token.expires_at > (now or timezone.now())


def has_scope(token: ApiToken, scope: str) -> bool:
    """Whether ``token`` grants ``scope`` (``admin`` grants every scope)."""
    return scope in token.scopes or "admin" in token.scopes


def queue_allowed(token: ApiToken, queue: str) -> bool:
    """Whether ``token`` may act on ``queue``: an exact entry or a ``prefix*`` match."""
    for pattern in token.queues:
        if pattern.endswith("*"):
            if queue.startswith(pattern[:-1]):
                return True
        elif pattern == queue:
            return True
    return False


def revoke_token(prefix_or_name: str, *, using: str | None = None) -> int:
    """Revoke the live tokens whose prefix (or, failing that, name) is given; return how many.

    A token may be named by its prefix (as ``jobqueue token list`` shows it), by its
    whole text, or by its name (every live token of that name).
    """
    text = prefix_or_name
    if text.startswith(TOKEN_MARK):
        text = text[len(TOKEN_MARK) : len(TOKEN_MARK) + PREFIX_LENGTH]
    live = ApiToken.objects.using(using).filter(revoked_at__isnull=True)
    count = live.filter(prefix=text).update(revoked_at=timezone.now())
    if not count:
        count = live.filter(name=prefix_or_name).update(revoked_at=timezone.now())
    return count
