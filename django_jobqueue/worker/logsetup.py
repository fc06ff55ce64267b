"""Logging of ``manage.py runworkers``: a default handler, levels, a one-line formatter.

Django's ``DEFAULT_LOGGING`` configures the ``django`` and ``django.server``
loggers only, so in a project whose ``LOGGING`` says nothing about
``django_jobqueue`` the workers' records reach no handler, and Python's
last-resort handler prints the bare message: no time, no level. So
:func:`runworkers_logging` adds one stream handler with :data:`LINE_FORMAT` to the
``django_jobqueue`` logger when no handler is configured on it or an ancestor it
propagates to (the root logger). A project's own ``LOGGING`` wins: with a
handler there, nothing is added.

Levels follow ``--verbosity``: 0 WARNING, 1 INFO, 2 and more DEBUG (per-claim
lines). A project that sets a level on ``django_jobqueue`` itself keeps it at
the default verbosity 1; ``-v 0`` and ``-v 2`` override it.

:class:`OneLineFormatter` is for terminals: a record with an exception stays on
one line (``... error=ValueError: bad input``), while a second handler, a file,
keeps the traceback. The example project's ``LOGGING`` uses both.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from django.utils.log import AdminEmailHandler

__all__ = ["LINE_FORMAT", "OneLineFormatter", "level_for", "runworkers_logging"]

#: Format of the handler :func:`runworkers_logging` adds: time, level, process id,
#: logger name, message.
LINE_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
#: The logger every record of the app goes through (modules log to its children).
LOGGER_NAME = "django_jobqueue"
#: Name of the added handler (``logging.Handler.name``), so it can be recognised.
HANDLER_NAME = "django_jobqueue.runworkers"

_LEVELS = {0: logging.WARNING, 1: logging.INFO}


def level_for(verbosity: int) -> int:
    """Return the ``django_jobqueue`` log level of ``--verbosity`` (0 to 3).

    0: WARNING, 1: INFO, 2 and more: DEBUG.
    """
    return _LEVELS.get(verbosity, logging.DEBUG)


def _counts(handler: logging.Handler) -> bool:
    # Django's AdminEmailHandler (its "mail_admins") mails errors; it prints no line.
    return not isinstance(handler, AdminEmailHandler)


def has_handler(logger: logging.Logger) -> bool:
    """Return whether a configured handler gets ``logger``'s records.

    Looks at ``logger`` and its ancestors up to the first that does not propagate,
    like :meth:`logging.Logger.hasHandlers`, but does not count Django's
    ``AdminEmailHandler`` (it mails, it prints nothing).
    """
    current: logging.Logger | None = logger
    while current is not None:
        if any(_counts(handler) for handler in current.handlers):
            return True
        if not current.propagate:
            return False
        current = current.parent
    return False


def add_default_handler(stream: IO[str] | None = None) -> logging.Handler | None:
    """Add a :data:`LINE_FORMAT` stream handler to ``django_jobqueue`` if none is configured.

    Parameters
    ----------
    stream:
        Where the lines go (default: ``sys.stderr``).

    Returns
    -------
    logging.Handler | None
        The handler added, or None when a handler already gets the records (the
        project's ``LOGGING``, or one added before, e.g. inherited by a fork).
    """
    logger = logging.getLogger(LOGGER_NAME)
    if has_handler(logger):
        return None
    handler = logging.StreamHandler(stream)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(logging.Formatter(LINE_FORMAT))
    logger.addHandler(handler)
    return handler


@contextmanager
def runworkers_logging(verbosity: int, stream: IO[str] | None = None) -> Iterator[int]:
    """Set up ``django_jobqueue`` logging for one ``runworkers`` run; undo it on exit.

    Parameters
    ----------
    verbosity:
        The command's ``--verbosity`` (0 to 3), see :func:`level_for`.
    stream:
        Where the default handler writes (default: ``sys.stderr``).

    Yields
    ------
    int
        The level set on the ``django_jobqueue`` logger, for child processes.
    """
    logger = logging.getLogger(LOGGER_NAME)
    previous_level = logger.level
    handler = add_default_handler(stream)
    if handler is not None or verbosity != 1 or logger.level == logging.NOTSET:
        logger.setLevel(level_for(verbosity))
    try:
        yield logger.level
    finally:
        if handler is not None:
            logger.removeHandler(handler)
        logger.setLevel(previous_level)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    name = type(error).__name__
    return f"{name}: {text}" if text else name


class OneLineFormatter(logging.Formatter):
    """Format a record on one line, its exception as ``error=Class: message``.

    No traceback and no stack: use it on a terminal next to a handler (a file)
    that keeps them. Takes the arguments of :class:`logging.Formatter`; in
    ``LOGGING``: ``{"class": "django_jobqueue.worker.logsetup.OneLineFormatter",
    "format": "..."}``.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Return ``record`` formatted, with its exception summed up on the same line."""
        error = record.exc_info[1] if record.exc_info else None
        saved = record.exc_info, record.exc_text, record.stack_info
        # Another handler's formatter may have cached the traceback in exc_text.
        record.exc_info, record.exc_text, record.stack_info = None, None, None
        try:
            text = super().format(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = saved
        text = " ".join(text.splitlines())
        return f"{text} error={_one_line(error)}" if error is not None else text
