"""``jobqueue_client.producer``, under the app's name (see :mod:`django_jobqueue.client`)."""

from __future__ import annotations

from jobqueue_client.producer import *  # noqa: F403
from jobqueue_client.producer import __all__  # noqa: F401
