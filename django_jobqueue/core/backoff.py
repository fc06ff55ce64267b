"""Retry backoff: when a failed attempt runs again.

The delay after failed attempt ``n`` (1-based) is exponential with jitter::

    base  = min(BACKOFF_MAX_MS, BACKOFF_BASE_MS * 2 ** (n - 1))
    delay = base * uniform(1 - BACKOFF_JITTER, 1 + BACKOFF_JITTER), at most BACKOFF_MAX_MS

so with the defaults (1 s base, 1 h cap, 25 % jitter) retries come after about 1 s,
2 s, 4 s, 8 s, ... Jitter spreads the retries of jobs that failed together.
"""

from __future__ import annotations

import random

from .conf import get_config

__all__ = ["backoff_ms"]


def backoff_ms(attempt: int, *, rng: random.Random | None = None) -> int:
    """Return the delay in ms before the attempt after failed attempt ``attempt``.

    Parameters
    ----------
    attempt:
        The number of the attempt that failed, 1 for the first.
    rng:
        Random source for the jitter (tests pass a seeded one).
    """
    config = get_config()
    exponent = min(max(attempt, 1) - 1, 62)
    base = min(config.BACKOFF_MAX_MS, config.BACKOFF_BASE_MS * 2**exponent)
    jitter = config.BACKOFF_JITTER
    factor = (rng or random).uniform(1 - jitter, 1 + jitter)  # noqa: S311 (not crypto)
    return int(min(config.BACKOFF_MAX_MS, base * factor))
