"""Deprecated path of :mod:`django_jobqueue.store.apitokens`, kept for existing imports.

The gateway's API tokens (issue, authenticate, revoke) now live in the store package
(CHANGELOG.md, "Module paths").
"""

from __future__ import annotations

from .store.apitokens import *  # noqa: F403
from .store.apitokens import __all__  # noqa: F401
