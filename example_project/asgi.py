"""ASGI entry point of the example project: ``uvicorn example_project.asgi:application``.

The gateway's routes (``/sdk/``) go to its own handler, where a waiting claim holds
no thread and producers' requests never queue behind claims; every other page to
Django's (docs/deployment.md).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

site = get_asgi_application()

from django_jobqueue.gateway.asgi import gateway_application  # noqa: E402 (after setup)

application = gateway_application(site, prefix="/sdk/")
