"""Test job types: every module of ``tests.testapp.jobtypes`` is imported here.

The registry autodiscovers each installed app's ``jobs`` module, so worker
subprocesses started by the tests know the same job types as the test process.
"""

from __future__ import annotations

import importlib
import pkgutil

from . import jobtypes

for _module in pkgutil.iter_modules(jobtypes.__path__):
    importlib.import_module(f"{jobtypes.__name__}.{_module.name}")
