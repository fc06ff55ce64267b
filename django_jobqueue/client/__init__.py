"""The gateway's Python client under the app's name: a re-export of ``jobqueue_client``.

The client is a distribution of its own, ``django-jobqueue-client`` (``clients/python/``
in the repository; the ``client`` extra installs it), so that a process without Django
can use it: ``from jobqueue_client import Client, Worker`` there. In a project that has
the app, ``from django_jobqueue.client import Client`` is the same class, and the
submodules ``django_jobqueue.client.errors`` (``.calls``, ``.producer``, ``.types``,
``.worker``) are those of ``jobqueue_client`` (README, "The Python client").
"""

from __future__ import annotations

try:
    from jobqueue_client import *  # noqa: F403
    from jobqueue_client import __all__, __version__  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - the message is the point
    if exc.name != "jobqueue_client":
        raise
    raise ModuleNotFoundError(
        "django_jobqueue.client is the django-jobqueue-client distribution: "
        'pip install "django-jobqueue[client]" (from a checkout: pip install ./clients/python)',
        name=exc.name,
    ) from exc
