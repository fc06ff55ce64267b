"""The project's licence: the key in ``JOBQUEUE``, the Pro gate and its system check.

:func:`current_licence` verifies ``JOBQUEUE["LICENCE_KEY"]`` against the shipped keys
plus ``JOBQUEUE["LICENCE_PUBLIC_KEYS"]``, caching the signature check per setting
value (cleared when ``JOBQUEUE`` changes) and judging expiry on every call.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.core.checks import CheckMessage
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from ...core.conf import get_config
from ...core.exceptions import ProRequired
from .keys import load_public_key, shipped_public_keys
from .token import DecodedToken, Licence, LicenceStatus, decode_token, judge_token

__all__ = ["check_licence", "current_licence", "is_pro", "require_pro"]

logger = logging.getLogger(__name__)


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
def _decode_cached(key: str, extra_public_keys: tuple[str, ...]) -> DecodedToken:
    extra, problems = _load_extra_keys(extra_public_keys)
    for problem in problems:
        logger.warning("Ignoring a licence public key: %s", problem)
    decoded = decode_token(key, shipped_public_keys() + extra)
    if decoded.status is not LicenceStatus.MISSING:
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
        If the ``JOBQUEUE`` setting itself is invalid (see ``django_jobqueue.core.conf``).

    Implements: docs/design.md#core-and-pro.
    """
    config = get_config()
    return judge_token(_decode_cached(config.LICENCE_KEY, tuple(config.LICENCE_PUBLIC_KEYS)), None)


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

    Implements: docs/design.md#core-and-pro.
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

    Implements: docs/design.md#core-and-pro.
    """
    licence = current_licence()
    if licence.is_pro:
        return
    reason = "no licence key is set" if licence.problem is None else licence.problem
    raise ProRequired(
        f"{feature} needs a Pro licence, but {reason}; set JOBQUEUE['LICENCE_KEY'] "
        "to a valid Pro key, or use a Core feature instead."
    )


def check_licence(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when a licence key is set but does not put Pro in force.

    A missing key is not a warning: Core is a complete product. Register it with
    ``django.core.checks.register`` (``django_jobqueue/checks.py`` does).

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

    Implements: docs/design.md#core-and-pro.
    """
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
