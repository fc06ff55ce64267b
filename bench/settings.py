"""Settings of the benchmarks: the test settings with the ``bench`` app (its job types)
instead of the test and example apps, so only the benchmark's job types are known (a
test type with a ``concurrent`` limit would cap every claim's batch at its room).

The database comes from ``DATABASE_URL`` as in :mod:`tests.settings`.
"""

from __future__ import annotations

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

_DROPPED = ("tests.testapp", "example_project.newsletter")
INSTALLED_APPS = [*(app for app in INSTALLED_APPS if app not in _DROPPED), "bench"]
