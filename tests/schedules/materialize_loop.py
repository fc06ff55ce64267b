"""Call ``schedules.materialize_due`` in a loop, as a foreman does, then print a count.

Run as ``python -m tests.schedules.materialize_loop SECONDS`` with DATABASE_URL set
to the test database; prints ``{"made": N, "calls": M}`` as JSON on its last line.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    import django

    django.setup()
    from django_jobqueue.schedules import materialize_due

    seconds = float(sys.argv[1])
    made = calls = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        made += materialize_due("default")
        calls += 1
        time.sleep(random.uniform(0.02, 0.3))  # noqa: S311 (jitter, not security)
    sys.stdout.write(json.dumps({"made": made, "calls": calls}) + "\n")


if __name__ == "__main__":
    main()
