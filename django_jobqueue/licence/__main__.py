"""Run ``python -m django_jobqueue.licence``: the deprecated path of ``python -m
django_jobqueue.store.licence`` (CHANGELOG.md, "Module paths")."""

from __future__ import annotations

import sys

from ..store.licence.cli import main

sys.exit(main())
