"""Deprecated path of :mod:`django_jobqueue.store.licence`, kept for existing imports.

``from django_jobqueue.licence import issue_licence`` and ``python -m
django_jobqueue.licence`` keep working; the code lives in the store package
(CHANGELOG.md, "Module paths").
"""

from __future__ import annotations

from ..store.licence import *  # noqa: F403
from ..store.licence import __all__  # noqa: F401
