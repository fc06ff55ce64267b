"""Unique-key rules (docs/design.md#core-and-pro): modes, the TTL clamp, the Pro gate, releases.

A job enqueued with a ``unique_key`` holds (queue, unique key) from its creation:
while the hold is live an identical enqueue answers ``deduplicated``. Its mode says
when the hold ends early; its TTL always bounds it:

====================  =======  ================================================
``unique_mode``       edition  the hold ends
====================  =======  ================================================
``while_locked``      Core     when ``unique_ttl_ms`` passes (the default mode)
``until_executing``   Pro      when a worker claims the job (:func:`claim_release`)
``until_executed``    Pro      when the job completes (:func:`complete_release`);
                               a failure, even a dead letter, keeps it to the TTL
====================  =======  ================================================

In every mode a cancel ends the hold at once (:func:`cancel_release`), with the
job's id: a cancelled job is one nobody wants, so it must not turn an identical
enqueue away. A dead letter (``error``, ``max_retry``) is not a cancel and keeps
its key until the TTL (docs/design.md#unique-keys).

The TTL is clamped to 1 s .. 7 days (default 1 hour). The hold itself is the row's
``unique_key_hash`` (see :mod:`django_jobqueue.models`); the manager's create path
checks and takes it (:meth:`django_jobqueue.store.managers.JobManager.create_job`), and
:mod:`django_jobqueue.storage` ends it at the release points below.
"""

from __future__ import annotations

from typing import Any

from django.db.models import Case, F, Value, When

from ..core.exceptions import InvalidOption, InvalidRequest
from ..core.validation import check_text
from .licence import require_pro

__all__ = [
    "MODES",
    "PRO_MODES",
    "UNIQUE_TTL_DEFAULT_MS",
    "UNIQUE_TTL_MAX_MS",
    "UNIQUE_TTL_MIN_MS",
    "UNTIL_EXECUTED",
    "UNTIL_EXECUTING",
    "WHILE_LOCKED",
    "cancel_release",
    "claim_release",
    "clamp_ttl_ms",
    "complete_release",
    "unique_options",
]

#: The modes (docs/design.md#unique-keys); ``models.UniqueMode`` stores them.
WHILE_LOCKED = "while_locked"
UNTIL_EXECUTING = "until_executing"
UNTIL_EXECUTED = "until_executed"
#: The modes that need a valid Pro licence.
PRO_MODES = (UNTIL_EXECUTING, UNTIL_EXECUTED)
MODES = (WHILE_LOCKED, *PRO_MODES)
#: Unique key TTL bounds and default (docs/design.md#unique-keys), ms.
UNIQUE_TTL_MIN_MS = 1_000
UNIQUE_TTL_MAX_MS = 7 * 86_400_000
UNIQUE_TTL_DEFAULT_MS = 3_600_000


def clamp_ttl_ms(unique_ttl_ms: Any) -> int:
    """Return ``unique_ttl_ms`` clamped to 1 s .. 7 days, in whole ms.

    Raises
    ------
    InvalidOption
        If ``unique_ttl_ms`` is not a number (an int or float, not a bool, not NaN).
    """
    if (
        isinstance(unique_ttl_ms, bool)
        or not isinstance(unique_ttl_ms, int | float)
        or unique_ttl_ms != unique_ttl_ms  # NaN
    ):
        raise InvalidOption(f"unique_ttl_ms must be a number of ms: got {unique_ttl_ms!r}.")
    return int(min(max(unique_ttl_ms, UNIQUE_TTL_MIN_MS), UNIQUE_TTL_MAX_MS))


def unique_options(
    unique_key: str | None, unique_mode: str | None, unique_ttl_ms: Any
) -> tuple[str, int]:
    """Validate an enqueue's unique options; return (mode, TTL in ms) to store.

    Without a ``unique_key`` the mode and TTL are ignored: ``("", default TTL)``.
    The Pro gate runs last, so a bad option is named before a missing licence.

    Raises
    ------
    InvalidJobId
        If ``unique_key`` is not 1 to 1,024 bytes of UTF-8 without NUL.
    InvalidRequest
        If ``unique_mode`` is not one of :data:`MODES`.
    InvalidOption
        If ``unique_ttl_ms`` is not a number.
    ProRequired
        If the mode is a Pro mode and no valid licence is in force.

    Implements: docs/design.md#unique-keys.
    """
    if unique_key is None:
        return "", UNIQUE_TTL_DEFAULT_MS
    check_text(unique_key, "A unique_key")
    mode = WHILE_LOCKED if unique_mode is None else unique_mode
    if mode not in MODES:
        raise InvalidRequest(f"unique_mode must be one of {', '.join(MODES)}: got {unique_mode!r}.")
    ttl_ms = UNIQUE_TTL_DEFAULT_MS if unique_ttl_ms is None else clamp_ttl_ms(unique_ttl_ms)
    if mode in PRO_MODES:
        require_pro(f"unique_mode={mode!r}")
    return mode, ttl_ms


def claim_release() -> dict[str, Any]:
    """Return the claim's field update that ends an ``until_executing`` hold.

    A database expression, so one ``UPDATE`` claims jobs of every mode: the others
    keep their ``unique_key_hash``.
    """
    return {
        "unique_key_hash": Case(
            When(unique_mode=UNTIL_EXECUTING, then=Value(None)),
            default=F("unique_key_hash"),
        )
    }


def complete_release(mode: str) -> dict[str, Any]:
    """Return the field updates of a success that end a hold of ``mode``: ``until_executed``."""
    return {"unique_key_hash": None} if mode == UNTIL_EXECUTED else {}


def cancel_release() -> dict[str, Any]:
    """Return the field updates of a cancel: they end the job's unique-key and id holds.

    For every path that makes a job ``cancelled``: an operator's cancel of a waiting
    job (:func:`django_jobqueue.maintenance.cancel_jobs`) and the worker storing that
    a running job stopped after a cancel request. Any mode: a cancelled job frees its
    key at once, unlike a dead letter, which keeps it until the TTL.
    """
    return {"unique_key_hash": None, "job_id_hash": None}
