"""runworkers' logging set-up (django_jobqueue.worker.logsetup), in this process.

The subprocess tests of the same behaviour (line format, -v 2 claim lines, a
project's own LOGGING) are in tests/worker/test_runworkers.py.
"""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.utils.log import AdminEmailHandler

from django_jobqueue.worker.logsetup import (
    LINE_FORMAT,
    OneLineFormatter,
    add_default_handler,
    has_handler,
    level_for,
    runworkers_logging,
)


def error_record(error: BaseException, msg: str = "job failed jid=%s") -> logging.LogRecord:
    try:
        raise error
    except BaseException:  # noqa: BLE001 (captured for the record)
        exc_info = sys.exc_info()
    return logging.LogRecord(
        "django_jobqueue.x", logging.ERROR, __file__, 1, msg, ("j1",), exc_info
    )


def test_one_line_formatter__puts_the_error_on_the_records_line():
    formatter = OneLineFormatter("%(levelname)s %(message)s")
    text = formatter.format(error_record(ValueError("bad\n  input")))
    assert text == "ERROR job failed jid=j1 error=ValueError: bad input"


def test_one_line_formatter__ignores_a_traceback_another_handler_cached():
    record = error_record(KeyError("k"))
    full = logging.Formatter("%(message)s").format(record)
    assert "Traceback" in full  # cached in record.exc_text now
    assert OneLineFormatter("%(message)s").format(record) == "job failed jid=j1 error=KeyError: 'k'"
    # And the record keeps its exception for handlers after this one.
    assert record.exc_info is not None
    assert logging.Formatter("%(message)s").format(record) == full


def test_one_line_formatter__error_without_a_message_and_record_without_error():
    formatter = OneLineFormatter("%(message)s")
    assert formatter.format(error_record(RuntimeError())) == "job failed jid=j1 error=RuntimeError"
    plain = logging.LogRecord("x", logging.INFO, __file__, 1, "two\nlines", None, None)
    assert formatter.format(plain) == "two lines"


def test_has_handler__looks_up_the_ancestors_and_skips_admin_mail():
    # A hierarchy of its own: pytest attaches its capture handlers to the global one.
    root = logging.RootLogger(logging.WARNING)
    manager = logging.Manager(root)
    parent = manager.getLogger("app")
    child = manager.getLogger("app.worker")
    assert not has_handler(child)
    root.addHandler(AdminEmailHandler())
    assert not has_handler(child)  # mails errors, prints no line
    root.addHandler(logging.StreamHandler(io.StringIO()))
    assert has_handler(child)
    parent.propagate = False  # root's handlers no longer get child's records
    assert not has_handler(child)
    parent.addHandler(logging.StreamHandler(io.StringIO()))
    assert has_handler(child)


@contextmanager
def no_project_handler() -> Iterator[logging.Logger]:
    """The django_jobqueue logger with no handler on it or root (Django's defaults).

    Use it in the test's body: pytest adds its capture handlers to root as the
    test starts, after the fixtures.
    """
    root, logger = logging.getLogger(), logging.getLogger("django_jobqueue")
    saved = list(root.handlers), list(logger.handlers), logger.level
    root.handlers.clear()
    logger.handlers.clear()
    try:
        yield logger
    finally:
        root.handlers[:], logger.handlers[:] = saved[0], saved[1]
        logger.setLevel(saved[2])


def test_runworkers_logging__adds_a_formatted_handler_and_removes_it():
    stream = io.StringIO()
    with no_project_handler() as logger:
        logger.setLevel(logging.NOTSET)
        with runworkers_logging(2, stream) as level:
            assert level == logging.DEBUG
            (handler,) = logger.handlers
            assert handler.formatter is not None
            assert handler.formatter._fmt == LINE_FORMAT
            assert add_default_handler(stream) is None  # one is enough
            logging.getLogger("django_jobqueue.worker.foreman").debug("job claimed jid=%s", "j1")
        assert logger.handlers == []
        assert logger.level == logging.NOTSET
    assert "DEBUG [" in stream.getvalue()
    assert "] django_jobqueue.worker.foreman: job claimed jid=j1" in stream.getvalue()


def test_runworkers_logging__a_projects_handler_and_level_win_at_verbosity_1():
    # The tests' LOGGING puts a handler on root; here the project also sets a level.
    logger = logging.getLogger("django_jobqueue")
    before = list(logger.handlers)
    logger.setLevel(logging.WARNING)
    try:
        with runworkers_logging(1, io.StringIO()) as level:
            assert logger.handlers == before
            assert level == logging.WARNING
        with runworkers_logging(2, io.StringIO()) as level:
            assert level == logging.DEBUG  # asked for explicitly
        assert logger.level == logging.WARNING
    finally:
        logger.setLevel(logging.NOTSET)


@pytest.mark.parametrize(
    ("verbosity", "level"),
    [(0, logging.WARNING), (1, logging.INFO), (2, logging.DEBUG), (3, logging.DEBUG)],
)
def test_level_for(verbosity, level):
    assert level_for(verbosity) == level
