"""The fault tests' side of a fault server's database, run as a subprocess.

``python -m tests.faults.helpers enqueue COUNT SECONDS`` enqueues COUNT
``worker.sleep`` jobs of SECONDS each and prints their jids as one JSON list;
``enqueue-record COUNT`` does the same with ``worker.record`` jobs (result
``{"label": "<i>"}``); ``report`` prints one JSON object: ``statuses`` (jobs by
status), ``done_types`` (done jobs by job type), ``runs`` (RunRecord rows by jid),
``doubles`` (by jid of a job that ran more than once: ``[attempt, worker, started]``
of each run), ``errors`` (by jid of those: ``[attempt, exception_class, message,
at]`` of each entry of its errors, if its row is still there), ``results_missing``
(done jobs without their result) and ``pickup_s`` (by jid: first run start minus
enqueue time, s). All act on the database ``DATABASE_URL`` names
(tests/settings.py), which the fault fixtures point at a database of their own on
a fault server.
"""

from __future__ import annotations

import json
import sys
from collections import Counter


def main(argv: list[str]) -> int:
    import django

    django.setup()
    from django.db import transaction
    from django.db.models import Min

    from django_jobqueue import enqueue_job
    from django_jobqueue.models import Job
    from tests.testapp.models import RunRecord

    if argv[0] in ("enqueue", "enqueue-record"):
        count = int(argv[1])
        with transaction.atomic():
            if argv[0] == "enqueue":
                seconds = float(argv[2])
                jids = [
                    enqueue_job(None, "worker.sleep", {"s": seconds, "label": str(i)})["jid"]
                    for i in range(count)
                ]
            else:
                jids = [
                    enqueue_job(None, "worker.record", {"label": str(i)})["jid"]
                    for i in range(count)
                ]
        print(json.dumps(jids))  # noqa: T201 (read by the test)
        return 0
    if argv[0] == "report":
        statuses = Counter(Job.objects.values_list("status", flat=True))
        runs = Counter(RunRecord.objects.values_list("jid", flat=True))
        missing = 0
        for job_type, payload, result in Job.objects.filter(status="done").values_list(
            "job_type", "payload", "result"
        ):
            if job_type == "worker.record" and result != {"label": payload["label"]}:
                missing += 1
        first = dict(
            RunRecord.objects.values("jid").annotate(at=Min("created_at")).values_list("jid", "at")
        )
        pickup = {
            jid: (first[jid] - created).total_seconds()
            for jid, created in Job.objects.values_list("jid", "created_at")
            if jid in first
        }
        doubles = {
            jid: [
                [attempt, worker, at.isoformat()]
                for attempt, worker, at in RunRecord.objects.filter(jid=jid).values_list(
                    "attempt", "worker", "created_at"
                )
            ]
            for jid, n in runs.items()
            if n > 1
        }
        errors = {
            jid: [[e.get("attempt"), e.get("exception_class"), e.get("message"), e.get("at")]
                  for e in job_errors or []]
            for jid, job_errors in Job.objects.filter(jid__in=list(doubles)).values_list(
                "jid", "errors"
            )
        }  # fmt: skip
        report = {
            "statuses": dict(statuses),
            "errors": errors,
            "done_types": dict(
                Counter(Job.objects.filter(status="done").values_list("job_type", flat=True))
            ),
            "doubles": doubles,
            "runs": dict(runs),
            "results_missing": missing,
            "pickup_s": pickup,
        }
        print(json.dumps(report))  # noqa: T201
        return 0
    print(f"unknown command {argv[0]!r}", file=sys.stderr)  # noqa: T201
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
