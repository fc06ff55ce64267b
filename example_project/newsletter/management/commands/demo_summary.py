"""Print what the workers did: jobs by type and status, retries and dead letters."""

from __future__ import annotations

import argparse
from collections import defaultdict
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db.models import Count
from django.utils import timezone

from django_jobqueue.models import DEAD_STATUSES, Job, JobStatus


class Command(BaseCommand):
    help = (
        "Print a table of the jobs by type and status, with the jobs that needed "
        "retries and the dead letters. With --check-idle, print what is still pending "
        "and exit 1 unless nothing is running or due within --horizon seconds."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--check-idle",
            action="store_true",
            help="Exit 0 when no job is processing or waiting to run soon, else 1.",
        )
        parser.add_argument(
            "--horizon",
            type=float,
            default=30.0,
            help="With --check-idle: waiting jobs due within this many seconds count "
            "as pending (default %(default)r); later ones (schedules) do not.",
        )

    def handle(self, *args: Any, check_idle: bool, horizon: float, **options: Any) -> None:
        if check_idle:
            self._check_idle(horizon)
            return
        self._table()

    def _check_idle(self, horizon: float) -> None:
        soon = timezone.now() + timedelta(seconds=horizon)
        processing = Job.objects.processing().count()
        waiting = Job.objects.waiting().filter(run_at__lte=soon).count()
        if processing or waiting:
            self.stdout.write(f"pending: {waiting} waiting, {processing} processing")
            raise CommandError("jobs are still pending", returncode=1)

    def _table(self) -> None:
        counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        rows = Job.objects.values_list("job_type", "status").annotate(n=Count("pk"))
        for job_type, status, n in rows:
            counts[job_type][status] += n
        retried: dict[str, int] = defaultdict(int)
        failed_attempts: dict[str, int] = defaultdict(int)
        for job_type, errors in Job.objects.exclude(errors=[]).values_list("job_type", "errors"):
            retried[job_type] += 1
            failed_attempts[job_type] += len(errors or [])
        table = []
        for job_type in sorted(counts):
            row = counts[job_type]
            done = row[JobStatus.DONE]
            dead = sum(row[s] for s in DEAD_STATUSES)
            total = sum(row.values())
            table.append(
                [
                    job_type,
                    done,
                    retried[job_type],
                    failed_attempts[job_type],
                    dead,
                    total - done - dead,
                    total,
                ]
            )
        # Columns: jobs done; jobs that needed a retry (any outcome); failed attempts
        # of all jobs; dead letters (failed for good); jobs not finished either way
        # (waiting, running, cancelled), shown only when there are some; all jobs.
        header = ["job type", "done", "retried", "failed attempts", "dead", "other", "total"]
        keep = [i for i in range(len(header)) if header[i] != "other" or any(r[i] for r in table)]
        header = [header[i] for i in keep]
        table = [[r[i] for i in keep] for r in table]
        totals = ["all", *(sum(r[i] for r in table) for i in range(1, len(header)))]
        widths = [max(len(str(r[i])) for r in [header, *table, totals]) for i in range(len(header))]

        def line(cells: list[Any]) -> str:
            first, *rest = cells
            return "  ".join(
                [
                    str(first).ljust(widths[0]),
                    *(str(c).rjust(w) for c, w in zip(rest, widths[1:], strict=True)),
                ]
            )

        rule = "-" * len(line(header))
        self.stdout.write(line(header))
        self.stdout.write(rule)
        for row in table:
            self.stdout.write(line(row))
        self.stdout.write(rule)
        self.stdout.write(line(totals))
        self.stdout.write(
            "retried: jobs that failed at least once; dead: jobs that failed for good"
            + ("; other: not finished yet, or cancelled." if "other" in header else ".")
        )
        from django.db import connection

        afresh = (
            "run git clean -fdX example_project/var to start afresh."
            if connection.vendor == "sqlite"
            else "point DATABASE_URL at an empty database to start afresh."
        )
        self.stdout.write(
            "The counts cover every job in the demo database, earlier runs included; " + afresh
        )
        done = sum(counts[t][JobStatus.DONE] for t in counts)
        dead = sum(counts[t][s] for t in counts for s in DEAD_STATUSES)
        self.stdout.write(
            f"\n{done} done, {sum(retried.values())} retried "
            f"({sum(failed_attempts.values())} failed attempts), {dead} dead "
            "(dead letters: see /admin/ under Job queue, filter by status)."
        )
