"""``jobqueue-worker``: run a gateway worker of Python handlers from the command line.

::

    JQ_URL=http://127.0.0.1:8000 JQ_TOKEN=jqt_... \\
        jobqueue-worker --handlers myapp.jobs:HANDLERS --queues mail,reports --concurrency 4

``--handlers MODULE[:NAME]`` names a module (imported with the current directory on
``sys.path``) or a ``.py`` file, and the mapping of job types to handlers in it
(``NAME``; default ``HANDLERS``, else ``handlers``); a handler is
``handler(payload, ctx)`` (:class:`~jobqueue_client.Worker`). The options and their
environment variables are those of the TypeScript client's ``worker-cli.js``:
``--url`` (``JQ_URL``: the site's root or the gateway's ``.../sdk``), ``--token``
(``JQ_TOKEN``, a token with the ``work`` scope), ``--queues`` (``JQ_QUEUES``, comma
separated), ``--concurrency`` (``JQ_CONCURRENCY``), ``--handlers`` (``JQ_HANDLERS``),
``--name``, ``--wait-ms``; the arguments override the environment. ``JOBQUEUE_URL`` and
``JOBQUEUE_TOKEN`` (the :class:`~jobqueue_client.Worker`'s own) are read when the
``JQ_`` ones are unset.

It prints ``jobqueue-worker: registered <name>: queues=... job_types=...
concurrency=N (...)`` to stderr once the gateway accepted it, a line per failed job
or refused call, and ``stopped: claimed=... completed=...`` at the end. SIGTERM or
SIGINT stops claiming; running jobs finish and are reported, then it exits 0.

Exit status: 0 after a graceful stop, 2 on a usage error (a bad option, a URL that is
not ``http(s)://host...``, a ``--lease-ms`` outside 1000 to 86400000, a handler module
that is not there or holds no handlers, or an option the gateway refuses as invalid
at registration or claim), 1 when the gateway refuses the worker (a bad token, a
queue the token may not use) or anything else fails.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import os
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .errors import BadRequest, GatewayError, InvalidRequest
from .version import DISTRIBUTION, VERSION
from .worker import Handler, Worker

__all__ = ["load_handlers", "main"]

PROG = "jobqueue-worker"

#: Names looked for in a handler module when ``--handlers`` names none.
DEFAULT_NAMES = ("HANDLERS", "handlers")


class UsageError(Exception):
    """A bad option or handler module: exit status 2."""


class _Formatter(logging.Formatter):
    """``jobqueue-worker: message``, with the level before warnings and errors (as the
    TypeScript worker prints them)."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        level = "" if record.levelno < logging.WARNING else f"{record.levelname} "
        return f"{PROG}: {level}{text}"


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        allow_abbrev=False,  # --queue is not --queues: a typo is an error
        description="Run jobs of a django-jobqueue gateway with Python handlers.",
        epilog=(
            "environment: JQ_URL, JQ_TOKEN, JQ_QUEUES, JQ_CONCURRENCY, JQ_HANDLERS (the "
            "same, overridden by the arguments); JOBQUEUE_URL and JOBQUEUE_TOKEN when "
            "the JQ_ ones are unset. SIGTERM/SIGINT: running jobs finish, then exit 0."
        ),
    )
    parser.add_argument(
        "--handlers",
        default=env.get("JQ_HANDLERS"),
        metavar="MODULE[:NAME]",
        help="module (or .py file) and the name of its job type -> handler mapping "
        "(default name: HANDLERS, else handlers)",
    )
    parser.add_argument(
        "--queues",
        default=env.get("JQ_QUEUES"),
        metavar="A,B",
        help="the queues to claim from, comma separated",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=env.get("JQ_CONCURRENCY") or "1",
        metavar="N",
        help="jobs run at once, each in a thread (default 1)",
    )
    parser.add_argument(
        "--url",
        default=env.get("JQ_URL") or env.get("JOBQUEUE_URL"),
        help="the site's root (http://host:8000) or the gateway's (.../sdk)",
    )
    parser.add_argument(
        "--token",
        default=env.get("JQ_TOKEN") or env.get("JOBQUEUE_TOKEN"),
        help="an API token (jqt_...) with the work scope",
    )
    parser.add_argument("--name", help="the registered name (default python-<host>-<pid>)")
    parser.add_argument(
        "--wait-ms",
        type=_non_negative_int,
        default=5_000,
        metavar="MS",
        help="longest wait of one claim, ms (default 5000; the gateway caps it)",
    )
    parser.add_argument(
        "--lease-ms",
        type=_positive_int,
        default=None,
        metavar="MS",
        help="lease asked for at claim and heartbeat, ms (default: the site's LEASE_MS)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="level of the messages on stderr (default INFO)",
    )
    parser.add_argument("--version", action="version", version=f"{DISTRIBUTION} {VERSION}")
    return parser


def gateway_url(url: str) -> str:
    """Return the gateway's base URL from the site's root or the gateway's own URL."""
    root = url.rstrip("/")
    return root if root.endswith("/sdk") else f"{root}/sdk"


def _import(module_name: str) -> ModuleType:
    if module_name.endswith(".py") or os.sep in module_name:
        path = Path(module_name)
        if not path.is_file():
            raise UsageError(f"--handlers: no file {module_name}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise UsageError(f"--handlers: cannot load {module_name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # Only the module asked for (or a package above it) missing is a usage error;
        # a missing import inside it is the module's own failure (exit status 1).
        if exc.name and (module_name == exc.name or module_name.startswith(f"{exc.name}.")):
            raise UsageError(f"--handlers: no module named {exc.name!r}") from None
        raise


def load_handlers(spec: str) -> dict[str, Handler]:
    """Return the job type -> handler mapping that ``spec`` (``MODULE[:NAME]``) names.

    Raises
    ------
    UsageError
        If the module or file is not there, it has no such name, or the name is not a
        non-empty mapping of job type strings to callables.
    Exception
        Whatever importing the module raised otherwise (its own failure).
    """
    module_name, _, name = spec.partition(":")
    if not module_name:
        raise UsageError(f"--handlers: {spec!r} names no module")
    module = _import(module_name)
    names = (name,) if name else DEFAULT_NAMES
    for candidate in names:
        if hasattr(module, candidate):
            handlers = getattr(module, candidate)
            break
    else:
        raise UsageError(
            f"--handlers: {module_name} has no {' or '.join(names)}: define a mapping of "
            'job types to handlers, e.g. HANDLERS = {"mail.send": send}'
        )
    if not isinstance(handlers, Mapping) or not handlers:
        raise UsageError(
            f"--handlers: {spec} is {type(handlers).__name__}, not a non-empty mapping of "
            "job types to handlers"
        )
    for job_type, handler in handlers.items():
        if not isinstance(job_type, str) or not job_type:
            raise UsageError(f"--handlers: {spec} has a job type that is not a name: {job_type!r}")
        if not callable(handler):
            raise UsageError(f"--handlers: the handler of {job_type!r} is not callable")
    return dict(handlers)


def _configure_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("%(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # httpx says every request at INFO: a line per claim and heartbeat.
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    """Run the command with ``argv`` (default ``sys.argv[1:]``) and ``env`` (default
    ``os.environ``); return its exit status (see the module docstring)."""
    env = os.environ if env is None else env
    parser = _parser(env)
    args = parser.parse_args(argv)  # exits 2 on a bad option, 0 on --help/--version
    for option, variable in (
        ("handlers", "JQ_HANDLERS"),
        ("queues", "JQ_QUEUES"),
        ("url", "JQ_URL"),
        ("token", "JQ_TOKEN"),
    ):
        if not getattr(args, option):
            parser.error(f"--{option} (or {variable}) is required")
    queues = [q.strip() for q in args.queues.split(",") if q.strip()]
    if not queues:
        parser.error("--queues must name at least one queue")
    _configure_logging(args.log_level)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` does: the project's own modules
    try:
        handlers = load_handlers(args.handlers)
    except UsageError as exc:
        parser.error(str(exc))
    except Exception:
        sys.stderr.write(f"{PROG}: ERROR importing {args.handlers} failed:\n")
        traceback.print_exc()
        return 1
    try:
        worker = Worker(
            handlers,
            url=gateway_url(args.url),
            token=args.token,
            queues=queues,
            concurrency=args.concurrency,
            name=args.name,
            wait_ms=args.wait_ms,
            lease_ms=args.lease_ms,
        )
    except ValueError as exc:  # a URL that is no http(s) URL, a lease out of bounds
        parser.error(str(exc))
    try:
        worker.run()
    except (BadRequest, InvalidRequest) as exc:
        logging.getLogger("jobqueue_client").error("the gateway refused an option: %s", exc)
        return 2
    except GatewayError as exc:
        logging.getLogger("jobqueue_client").error("the gateway refused the worker: %s", exc)
        return 1
    return 0


def entry_point() -> Any:
    """The console script: ``sys.exit(main())``."""
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
