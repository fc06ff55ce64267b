"""A prepared statement lost or changed under a session whose server speaks German.

Run as a subprocess by tests/faults/test_server_language.py, with ``DATABASE_URL`` on a
fault server's database and ``PGOPTIONS=-c lc_messages=de_DE.UTF-8``:
``python -m tests.faults.prepared_lost`` prints one JSON object:

- ``language``: the server's message for a division by zero (German proves the
  session's messages are);
- ``name_taken``: after a claim and an enqueue prepared their statements, each name is
  given to another statement of one parameter behind psycopg's back (what a
  transaction pooler does): the payloads the next claim got (``[2]`` expected), and
  whether the alias still prepares (``false`` expected: taken for a pooler's);
- ``bulk_name_taken``: the same on a new session for a streamed ``enqueue_many`` of
  600 jobs, sent in a pipeline: the statements swapped, and the jobs in its queue
  after the second batch (1,200 expected);
- ``plan_changed``: on a new session, a claim prepared, a returned column's type
  changed on another session (a deploy's migration): the payloads the next claim got,
  whether the alias still prepares (``true``), and the statements the refusal made it
  forget (the enqueue's, not empty).
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any


def main() -> int:
    import django

    django.setup()
    import psycopg
    from django.db import connection

    from django_jobqueue import enqueue_job, enqueue_many, storage
    from django_jobqueue.core import prepared
    from django_jobqueue.models import Job
    from django_jobqueue.store import claimfloor

    # Every claim here scans from the start, so each runs the one claim statement. A
    # claim slower than SLOW_CLAIM_MS (a loaded machine) would turn its floor on, and
    # a quick look below would turn it off again: the claim after either runs another
    # statement (the floor's bound added), prepared afresh, which meets no lost or
    # changed plan (store/claimfloor.py).
    claimfloor.SLOW_CLAIM_MS = math.inf

    report: dict[str, Any] = {}
    with connection.cursor() as cursor:
        try:
            cursor.execute("SELECT 1 / 0")
        except Exception as exc:  # noqa: BLE001 (its message is the report)
            report["language"] = str(exc).strip()

    def claim_payloads() -> list[Any]:
        claimed = storage.claim("default", owner="w", queues=["lang"], limit=5)
        return [job.payload["label"] for job in claimed]

    def prepared_names() -> list[str]:
        names = connection.connection.pgconn.exec_(b"SELECT name FROM pg_prepared_statements")
        return [names.get_value(row, 0).decode() for row in range(names.ntuples)]

    def swap_statements() -> int:
        """Behind psycopg's back, give each name it prepared on the session to another
        statement of one parameter (a transaction pooler's doing); return how many."""
        raw = connection.connection.pgconn
        names = prepared_names()
        for name in names:
            raw.exec_(f'DEALLOCATE "{name}"'.encode())
            raw.exec_(f'PREPARE "{name}" (int) AS SELECT $1'.encode())
        return len(names)

    # A name taken by another statement (08P01 at the bind).
    enqueue_job("lang", "worker.record", {"label": 1})
    claim_payloads()
    report["statements_swapped"] = swap_statements()
    enqueue_job("lang", "worker.record", {"label": 2})
    report["name_taken"] = {
        "claimed": claim_payloads(),
        "still_prepares": prepared.prepares(connection),
    }

    # The same in a streamed bulk insert, sent in a pipeline (where the cursor cannot
    # repeat the statement itself): the batch runs again, a statement at a time.
    prepared._pooled.clear()
    connection.close()
    rows = [
        {"queue": "bulk", "job_type": "worker.record", "payload": {"label": i}} for i in range(600)
    ]
    enqueue_many(rows)
    swapped = swap_statements()
    enqueue_many(rows)
    report["bulk_name_taken"] = {
        "swapped": swapped,
        "jobs": Job.objects.filter(queue="bulk").count(),
    }

    # A returned column's type changed by another session (0A000 at the execute).
    prepared._pooled.clear()
    connection.close()
    enqueue_job("lang", "worker.record", {"label": 3})
    claim_payloads()
    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"],
        dbname=settings["NAME"], autocommit=True,
    ) as other:  # fmt: skip
        other.execute(
            f'ALTER TABLE "{Job._meta.db_table}" ALTER COLUMN lease_owner TYPE varchar(300)'
        )
    enqueue_job("lang", "worker.record", {"label": 4})
    before = prepared_names()
    claimed = claim_payloads()
    report["plan_changed"] = {
        "claimed": claimed,
        "still_prepares": prepared.prepares(connection),
        # The refusal forgot every statement (DEALLOCATE ALL) and prepared the claim
        # anew: the enqueue's statement is gone.
        "forgotten": sorted(set(before) - set(prepared_names())),
    }
    print(json.dumps(report))  # noqa: T201 (read by the test)
    return 0


if __name__ == "__main__":
    sys.exit(main())
