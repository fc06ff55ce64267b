"""Deprecated path of :mod:`django_jobqueue.core.exceptions`, kept for existing imports.

``from django_jobqueue import NonRetryableError`` (or any other error) is the public
path; this module re-exports the same classes (CHANGELOG.md, "Module paths").
"""

from __future__ import annotations

from .core.exceptions import *  # noqa: F403
from .core.exceptions import __all__  # noqa: F401
