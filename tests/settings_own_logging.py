"""The test settings with a project's own ``LOGGING`` handler for ``django_jobqueue``.

``runworkers`` must leave it alone: its lines keep :data:`OWN_FORMAT`
(tests/worker/test_runworkers.py).
"""

from __future__ import annotations

from tests.settings import *  # noqa: F403

#: The project's own line format, recognisable in the worker's stderr.
OWN_FORMAT = "own-format|%(levelname)s|%(name)s|%(message)s"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"own": {"format": OWN_FORMAT}},
    "handlers": {"own": {"class": "logging.StreamHandler", "formatter": "own"}},
    "loggers": {"django_jobqueue": {"handlers": ["own"], "level": "INFO", "propagate": False}},
}
