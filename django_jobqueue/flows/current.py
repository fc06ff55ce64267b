"""The ``with batch()`` and ``with wait_for()`` blocks open in this context (thread or
asyncio task), if any.

A leaf: :mod:`django_jobqueue.enqueue` reads it on every enqueue (one ``ContextVar``
read), so it imports nothing that imports the enqueue path.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = [
    "OpenBlock",
    "open_after",
    "open_block",
    "reset_after",
    "reset_block",
    "set_after",
    "set_block",
]


@dataclass
class OpenBlock:
    """A ``with batch()`` block being built: its batch's pk and database, and the
    jids of the jobs enqueued inside it so far (joined to it when the block ends)."""

    batch_id: int
    using: str
    jids: list[str] = field(default_factory=list)


_block: ContextVar[OpenBlock | None] = ContextVar("django_jobqueue_batch_block", default=None)


def open_block() -> OpenBlock | None:
    """Return the innermost ``with batch()`` block open in this context, or None."""
    return _block.get()


def set_block(block: OpenBlock | None) -> object:
    """Make ``block`` the open one; return the token that :func:`reset_block` takes."""
    return _block.set(block)


def reset_block(token: object) -> None:
    """Restore the block that was open before :func:`set_block` returned ``token``."""
    _block.reset(token)  # type: ignore[arg-type]


#: The ``with wait_for()`` block open: (upstream jids, policy) every job enqueued in
#: it waits for.
_after: ContextVar[tuple[tuple[str, ...], str] | None] = ContextVar(
    "django_jobqueue_wait_for", default=None
)


def open_after() -> tuple[tuple[str, ...], str] | None:
    """Return the (upstream jids, policy) of the innermost ``with wait_for()``, or None."""
    return _after.get()


def set_after(after: tuple[tuple[str, ...], str] | None) -> object:
    """Make ``after`` the open ``wait_for``; return the token :func:`reset_after` takes."""
    return _after.set(after)


def reset_after(token: object) -> None:
    """Restore the ``wait_for`` that was open before :func:`set_after` returned ``token``."""
    _after.reset(token)  # type: ignore[arg-type]
