"""Run ``python -m django_jobqueue.store.licence``.

See :func:`django_jobqueue.store.licence.cli.main`.
"""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
