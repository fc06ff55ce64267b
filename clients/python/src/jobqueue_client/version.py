"""The client's version: its distribution's (``django-jobqueue-client``), as installed."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["DISTRIBUTION", "VERSION"]

#: The distribution this package is installed from (``pip install django-jobqueue-client``).
DISTRIBUTION = "django-jobqueue-client"

try:
    #: The installed version, e.g. ``"0.1.0"``; ``"0+unknown"`` when the package is
    #: imported from a source tree that was never installed.
    VERSION = version(DISTRIBUTION)
except PackageNotFoundError:
    VERSION = "0+unknown"
