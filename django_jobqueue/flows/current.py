"""The ``with batch()`` block open in this context (thread or asyncio task), if any.

A leaf: :mod:`django_jobqueue.enqueue` reads it on every enqueue (one ``ContextVar``
read), so it imports nothing that imports the enqueue path.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field

__all__ = ["OpenBlock", "open_block", "reset_block", "set_block"]


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
