"""The fault tests' side of a fault server's database, run as a subprocess.

``python -m tests.faults.helpers enqueue COUNT SECONDS`` enqueues COUNT
``worker.sleep`` jobs of SECONDS each and prints their jids as one JSON list;
``python -m tests.faults.helpers report`` prints one JSON object: ``statuses``
(jobs by status) and ``runs`` (RunRecord rows by jid). Both act on the database
``DATABASE_URL`` names (tests/settings.py), which the fault fixtures point at a
database of their own on a fault server.
"""

from __future__ import annotations

import json
import sys
from collections import Counter


def main(argv: list[str]) -> int:
    import django

    django.setup()
    from django.db import transaction

    from django_jobqueue import enqueue_job
    from django_jobqueue.models import Job
    from tests.testapp.models import RunRecord

    if argv[0] == "enqueue":
        count, seconds = int(argv[1]), float(argv[2])
        with transaction.atomic():
            jids = [
                enqueue_job(None, "worker.sleep", {"s": seconds, "label": str(i)})["jid"]
                for i in range(count)
            ]
        print(json.dumps(jids))  # noqa: T201 (read by the test)
        return 0
    if argv[0] == "report":
        statuses = Counter(Job.objects.values_list("status", flat=True))
        runs = Counter(RunRecord.objects.values_list("jid", flat=True))
        print(json.dumps({"statuses": dict(statuses), "runs": dict(runs)}))  # noqa: T201
        return 0
    print(f"unknown command {argv[0]!r}", file=sys.stderr)  # noqa: T201
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
