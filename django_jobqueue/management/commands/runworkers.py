"""``manage.py runworkers``: run foremen that claim and run jobs (docs/design.md#execution).

The command only parses and wires: the loops live in
:mod:`django_jobqueue.worker.foreman` and :mod:`django_jobqueue.worker.supervisor`,
the logging set-up (a default handler when the project's ``LOGGING`` has none for
``django_jobqueue``; the level from ``--verbosity``) in
:mod:`django_jobqueue.worker.logsetup`.
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import IO, Any, cast

from django.core import checks
from django.core.management.base import (
    BaseCommand,
    CommandError,
    CommandParser,
    SystemCheckError,
)
from django.db import DatabaseError, connections

from ...core.conf import MAX_CONCURRENCY, get_config
from ...core.exceptions import ImproperlyConfiguredJobQueue
from ...core.validation import MAX_INT
from ...enqueue import jobs_database
from ...models import Job
from ...store.pauses import paused_queues
from ...worker.foreman import Foreman, ForemanOptions, exit_past_stuck_handlers
from ...worker.logsetup import runworkers_logging
from ...worker.supervisor import Supervisor, tune_collector

#: Largest value of a millisecond flag: 2**31 - 1 ms, 24.8 days, as for the
#: settings' ms keys. Larger ones overflowed a thread's wait (OverflowError: a
#: traceback, or a slot thread gone) or the database's integers and timestamps (a
#: lease, a worker row): a worker that retried the failing statement for ever.
MAX_MS = MAX_INT
#: Largest --processes and --prefetch (jobs one claim takes beyond its free slots;
#: docs/prefetch.md); --concurrency stops at the setting's MAX_CONCURRENCY.
MAX_PROCESSES = 1_000
MAX_PREFETCH = 10_000


def _whole(text: str, what: str, low: int, high: int) -> int:
    """``text`` as an int in [``low``, ``high``]; argparse's error (a usage line,
    exit 2, or a CommandError under call_command) naming ``what`` otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {what} as a whole number, got {text!r}"
        ) from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"expected {what} from {low} to {high}, got {value}")
    return value


def _positive_int(high: int) -> Callable[[str], int]:
    """A flag's type: a whole number from 1 to ``high``."""
    return functools.partial(_whole, what="a number", low=1, high=high)


def _ms(text: str) -> int:
    return _whole(text, "milliseconds", 0, MAX_MS)


def _count(text: str) -> int:
    return _whole(text, "a number", 0, MAX_PREFETCH)


def _queues(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if not text.strip() or any(not name or len(name) > 100 for name in names):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated queue names of 1 to 100 characters, got {text!r}"
        )
    return names


class Command(BaseCommand):
    """Run worker threads that claim and run jobs until stopped."""

    #: The system checks a worker runs before it starts: those of what it uses
    #: (models, settings, caches, signals, async support and this app's own static
    #: ones, tagged ``compatibility``), not those of what only serves pages (URLs, the
    #: admin, templates, static files, security headers). The URL checks import every
    #: URLconf, which was a third of a worker's start-up. Database checks (tagged
    #: ``database``: they connect) run only when asked, as under Django's default
    #: (``manage.py check --database default``); checks without a tag run too
    #: (:meth:`check`). README "Quickstart".
    requires_system_checks = [
        checks.Tags.models,
        checks.Tags.compatibility,
        checks.Tags.caches,
        checks.Tags.signals,
        checks.Tags.async_support,
        checks.Tags.translation,
    ]

    def check(self, *args: Any, **kwargs: Any) -> None:
        """Run the checks of :attr:`requires_system_checks`, then those registered
        without a tag (Django's ``TASKS`` backend check, a project's ``@register()``
        ones), which a list of tags never selects.

        Raises
        ------
        SystemCheckError
            If a check reports an error (warnings are written to stderr).
        """
        super().check(*args, **kwargs)
        untagged = [c for c in checks.registry.registry.get_checks() if not getattr(c, "tags", ())]
        issues = [
            message
            for check in untagged
            for message in check(app_configs=None, databases=None)
            if not message.is_silenced()
        ]
        serious = [message for message in issues if message.is_serious()]
        if serious:
            found = "\n".join(str(message) for message in serious)
            raise SystemCheckError(f"System check identified some issues:\n\n{found}")
        for message in issues:
            if message.level >= checks.WARNING:
                self.stderr.write(str(message))

    help = (
        "Run job queue workers: one foreman with --concurrency worker threads, or "
        "--processes foremen under a supervisor. SIGTERM/SIGINT drains (running jobs "
        "get --shutdown-timeout ms, then go back to the queue); a second one forces."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            type=_queues,
            default=None,
            help="Comma-separated queues to claim from (default: every queue).",
        )
        parser.add_argument(
            "--concurrency",
            type=_positive_int(MAX_CONCURRENCY),
            default=None,
            help="Worker threads per process (default: JOBQUEUE['CONCURRENCY']).",
        )
        parser.add_argument(
            "--processes",
            type=_positive_int(MAX_PROCESSES),
            default=1,
            help="Foreman processes under one supervisor that restarts crashed ones "
            "(default: %(default)r).",
        )
        parser.add_argument(
            "--min-sleep",
            type=_ms,
            default=None,
            help="Shortest idle sleep between polls, ms (default: JOBQUEUE['MIN_SLEEP_MS']).",
        )
        parser.add_argument(
            "--max-sleep",
            type=_ms,
            default=None,
            help="Longest idle sleep between polls, ms (default: JOBQUEUE['MAX_SLEEP_MS']).",
        )
        parser.add_argument(
            "--break-time",
            type=_ms,
            default=None,
            help="Pause of a worker between two jobs, ms (default: JOBQUEUE['BREAK_TIME_MS']).",
        )
        parser.add_argument(
            "--ramp-time",
            type=_ms,
            default=None,
            help="Least time between two worker spawns, ms (default: JOBQUEUE['RAMP_TIME_MS']).",
        )
        parser.add_argument(
            "--prefetch-ms",
            type=_ms,
            default=None,
            help="Prefetch budget, ms: a claim holds beyond its free slots as many jobs of "
            "short job types as fit in it; 0: no prefetch unless --prefetch sets one (default: "
            "JOBQUEUE['PREFETCH_MS']; README \"Prefetch\").",
        )
        parser.add_argument(
            "--prefetch",
            type=_count,
            default=None,
            help="Most jobs a claim may hold beyond its free slots, of short job types "
            "only, instead of the number the --prefetch-ms budget fits (which still sets "
            "the hold time, 5 x --prefetch-ms); fewer while the slots' pace would not "
            "start them within half the hold time (default: the budget's number).",
        )
        parser.add_argument(
            "--lease",
            type=_ms,
            default=None,
            help="Lease of a claimed job, ms, >= 1000 (default: JOBQUEUE['LEASE_MS']); "
            "heartbeats come at most every third of it.",
        )
        parser.add_argument(
            "--heartbeat",
            type=_ms,
            default=None,
            help="Heartbeat interval, ms (default: JOBQUEUE['HEARTBEAT_MS'], at most a "
            "third of the lease).",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=_ms,
            default=None,
            help="How long running jobs may finish after SIGTERM, ms "
            "(default: JOBQUEUE['SHUTDOWN_TIMEOUT_MS']).",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            default=False,
            help="Drain the jobs due now and exit 0 when nothing is due or running "
            "(default: %(default)r).",
        )
        parser.add_argument(
            "--no-log-success",
            action="store_false",
            dest="log_success",
            default=None,
            help="No 'job finished ... status=done' INFO line per success (failures are "
            "still logged; -v 0 drops every INFO line) (default: JOBQUEUE['LOG_SUCCESS']).",
        )
        parser.add_argument(
            "--database",
            default=None,
            help="Database alias of the jobs (default: JOBQUEUE['DATABASE'] or the routers').",
        )

    def handle(
        self,
        *,
        queues: list[str] | None,
        concurrency: int | None,
        processes: int,
        min_sleep: int | None,
        max_sleep: int | None,
        break_time: int | None,
        ramp_time: int | None,
        prefetch_ms: int | None,
        prefetch: int | None,
        lease: int | None,
        heartbeat: int | None,
        shutdown_timeout: int | None,
        burst: bool,
        log_success: bool | None,
        database: str | None,
        verbosity: int,
        **options: Any,
    ) -> None:
        try:
            config = get_config()
        except ImproperlyConfiguredJobQueue as exc:
            raise CommandError(str(exc)) from exc
        if lease is not None and lease < 1000:
            raise CommandError(f"--lease must be at least 1000 ms: got {lease}.")
        low = config.MIN_SLEEP_MS if min_sleep is None else min_sleep
        high = config.MAX_SLEEP_MS if max_sleep is None else max_sleep
        if low < 1 or low > high:
            raise CommandError(
                f"--min-sleep ({low} ms) must be >= 1 and at most --max-sleep ({high} ms)."
            )
        self._require_job_table(database or jobs_database())
        foreman_options: dict[str, Any] = {
            "using": database,
            "queues": tuple(queues) if queues else None,
            "concurrency": concurrency,
            "min_sleep_ms": min_sleep,
            "max_sleep_ms": max_sleep,
            "break_time_ms": break_time,
            "ramp_time_ms": ramp_time,
            "prefetch_ms": prefetch_ms,
            "prefetch": prefetch,
            "lease_ms": lease,
            "heartbeat_ms": heartbeat,
            "shutdown_timeout_ms": shutdown_timeout,
            "burst": burst,
            "log_success": log_success,
        }
        # Without a handler in the project's LOGGING, lines get time, level, pid, logger.
        with runworkers_logging(verbosity, cast("IO[str]", self.stderr._out)) as level:
            try:
                foreman = None
                if processes == 1:
                    tune_collector()
                    foreman = Foreman(ForemanOptions(**foreman_options))
                    stats = foreman.run()
                    code = 0
                else:
                    supervisor = Supervisor(processes, foreman_options, log_level=level)
                    code = supervisor.run()
                    stats = dict(supervisor.stats)
            except ImproperlyConfiguredJobQueue as exc:
                raise CommandError(str(exc)) from exc
        if verbosity:
            summary = " ".join(f"{k}={v}" for k, v in sorted(stats.items()))
            self.stdout.write(f"runworkers finished: {summary or 'no jobs'}")
            if burst:
                self._say_paused(database, queues)
        if code:
            raise CommandError(
                "A burst worker process kept crashing; see the log above for its error."
            )
        if foreman is not None:
            exit_past_stuck_handlers(foreman)

    def _require_job_table(self, using: str) -> None:
        """Refuse to start on a database without the job table: ``manage.py migrate``
        not run yet, or ``--database`` / ``JOBQUEUE["DATABASE"]`` naming another
        database (README "Quickstart"). A foreman there logs a traceback per poll, and
        a ``--burst`` run never ends. One statement; a database that does not answer
        is left to the foreman, which waits for it (README "Delivery semantics").

        Raises
        ------
        CommandError
            If the database ``using`` answers and has no job table.
        """
        connection = connections[using]
        try:
            with connection.cursor() as cursor:
                tables = connection.introspection.table_names(cursor)
        except DatabaseError:
            return
        finally:
            # The foremen use connections of their own threads (or processes): this
            # one would stay open, idle, for the worker's whole life.
            if not connection.in_atomic_block:
                connection.close()
        if Job._meta.db_table not in tables:
            raise CommandError(
                f"Database {using!r} has no job table ({Job._meta.db_table}): run "
                '`manage.py migrate` first (README "Quickstart"), or point --database '
                "or JOBQUEUE['DATABASE'] at the database that has it."
            )

    def _say_paused(self, database: str | None, queues: list[str] | None) -> None:
        """After a --burst run: name the paused queues it was to drain, whose jobs it
        left waiting (a paused queue looks empty to a claim: README "Console")."""
        paused = paused_queues(database or jobs_database(), max_age_s=0)
        left = sorted(paused if not queues else paused.intersection(queues))
        if left:
            names = ", ".join(left)
            self.stdout.write(
                f"runworkers: paused, their jobs left waiting: {names} "
                f"(manage.py jobqueue resume {left[0]})"
            )
