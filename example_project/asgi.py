"""ASGI entry point of the example project: ``uvicorn example_project.asgi:application``.

Served under ASGI, the gateway's waiting claims hold no thread (docs/deployment.md).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

application = get_asgi_application()
