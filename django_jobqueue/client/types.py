"""``jobqueue_client.types``, under the app's name (see :mod:`django_jobqueue.client`)."""

from __future__ import annotations

from jobqueue_client.types import *  # noqa: F403
from jobqueue_client.types import __all__  # noqa: F401
