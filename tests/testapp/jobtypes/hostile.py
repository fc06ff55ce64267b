"""Job types of the hostile-input tests (tests/test_hostile_input.py): hostile outcomes."""

from __future__ import annotations

from typing import Any

from django_jobqueue.handle import job


@job("adv.echo", queue="adv", max_retry=0)
def echo(payload: Any = None, ctx: Any = None) -> Any:
    """Return the payload's ``result`` (a result the test chooses)."""
    kind = (payload or {}).get("result")
    if kind == "nul":
        return "a\x00b"
    if kind == "surrogate":
        return "\ud800"
    if kind == "deep":
        value: Any = []
        for _ in range(100_000):
            value = [value]
        return value
    return kind


@job("adv.raise", queue="adv", max_retry=0)
def raise_(payload: Any = None, ctx: Any = None) -> Any:
    """Raise an error whose message carries the payload's ``text`` (NUL, surrogates)."""
    kind = (payload or {})["text"]
    if kind == "broken str":
        raise _BrokenStr
    raise ValueError({"nul": "bad\x00byte", "surrogate": "bad\ud800char"}[kind])


class _BrokenStr(ValueError):
    """An error whose ``str()`` itself raises."""

    def __str__(self) -> str:
        raise RuntimeError("no text")
