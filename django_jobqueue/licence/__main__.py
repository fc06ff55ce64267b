"""Run ``python -m django_jobqueue.licence`` (see :func:`django_jobqueue.licence.cli.main`)."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
