"""``python -m jobqueue_client``: the ``jobqueue-worker`` command (:mod:`.cli`)."""

from .cli import entry_point

entry_point()
