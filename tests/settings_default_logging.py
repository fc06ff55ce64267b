"""The test settings under Django's default logging: a project whose ``LOGGING`` is empty.

``runworkers`` then adds its own handler (time, level, pid, logger name);
tests/worker/test_runworkers.py runs it with ``DJANGO_SETTINGS_MODULE`` set to this.
"""

from __future__ import annotations

from tests.settings import *  # noqa: F403

LOGGING: dict[str, object] = {}
