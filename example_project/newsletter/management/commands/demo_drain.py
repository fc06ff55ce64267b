"""Run ``manage.py runworkers --burst`` until the demo's workload is worked off."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import close_old_connections
from django.utils import timezone

from django_jobqueue.models import Job


def _seconds(value: str) -> float:
    number = float(value)
    if number <= 0:
        raise argparse.ArgumentTypeError(f"expected seconds > 0, got {value}")
    return number


def pending() -> tuple[int, int]:
    """Return (waiting jobs due within 30 s, processing jobs)."""
    close_old_connections()
    soon = timezone.now() + timedelta(seconds=30)
    return Job.objects.waiting().filter(run_at__lte=soon).count(), Job.objects.processing().count()


class Command(BaseCommand):
    help = (
        "Run 'manage.py runworkers --burst' (a real worker process) again and again until "
        "no job is running or due within 30 s, retries included: a burst exits once "
        "nothing is due, and a retry's backoff may not have passed yet. Fails after "
        "--timeout seconds. The workers' output goes to this command's terminal; "
        "LOGGING (settings.py) also writes it, tracebacks included, to WORKERS_LOG."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--timeout",
            type=_seconds,
            default=300.0,
            help="Give up after this many seconds (default %(default)r).",
        )
        parser.add_argument(
            "--idle-grace",
            type=_seconds,
            default=5.0,
            help="Seconds a burst may keep running once nothing is pending before it is "
            "stopped with SIGTERM (default %(default)r).",
        )

    def handle(self, *args: Any, timeout: float, idle_grace: float, **options: Any) -> None:
        log = Path(settings.WORKERS_LOG)
        if log.is_relative_to(settings.BASE_DIR):  # shown as scripts/demo's banner does
            log = log.relative_to(settings.BASE_DIR)
        command = [
            sys.executable,
            str(Path(settings.BASE_DIR) / "manage.py"),
            "runworkers",
            "--burst",
        ]
        deadline = time.monotonic() + timeout
        rounds = 0
        while True:
            rounds += 1
            if rounds > 1:
                self.stderr.write(f"demo_drain: burst round {rounds} (retries now due)")
            # The worker writes to this terminal: one line per failed attempt (LOGGING).
            worker = subprocess.Popen(command)  # noqa: S603
            idle_since: float | None = None
            while worker.poll() is None:
                time.sleep(0.5)
                if time.monotonic() > deadline:
                    worker.terminate()
                    worker.wait()
                    raise CommandError(self._late(timeout, log))
                if any(pending()):
                    idle_since = None
                elif idle_since is None:
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since > idle_grace:
                    # Nothing left, but the burst did not exit on its own: stop it.
                    self.stderr.write("demo_drain: nothing pending; stopping the burst")
                    worker.terminate()
                    worker.wait()
            if worker.returncode not in (0, -15):
                raise CommandError(
                    f"runworkers --burst exited with code {worker.returncode}; see {log}."
                )
            if not any(pending()):
                break
            if time.monotonic() > deadline:
                raise CommandError(self._late(timeout, log))
            time.sleep(0.3)
        self.stdout.write(
            f"demo_drain: workload done after {rounds} burst round(s); "
            f"full log with tracebacks: {log}"
        )

    @staticmethod
    def _late(timeout: float, log: Path) -> str:
        waiting, processing = pending()
        return (
            f"Jobs still pending after {timeout:g} s ({waiting} waiting, {processing} "
            f"processing); see {log}."
        )
