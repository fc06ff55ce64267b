"""A live gateway for the client tests: ``manage.py runserver`` in a subprocess.

The server runs ``tests.settings`` on the current *test* database (the environment of
:func:`tests.workers_helpers.worker_env`), with a ``JOBQUEUE`` of the test's choosing,
on a free port of 127.0.0.1. It sees committed rows only: use it from
``django_db(transaction=True)`` tests.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.workers_helpers import ROOT, worker_env

__all__ = ["free_port", "live_gateway"]

#: Seconds a server may take to answer its first request (a loaded machine runs every
#: database's leg at once on two cores).
START_TIMEOUT_S = 120


def free_port() -> int:
    """Return a TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def live_gateway(
    jobqueue: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    wsgiref: bool = False,
) -> Iterator[str]:
    """Run a gateway server; yield its base URL (``http://127.0.0.1:PORT/sdk``).

    Parameters
    ----------
    jobqueue:
        The server's ``JOBQUEUE`` setting (default: the app's defaults).
    env:
        Environment variables over the test database's (``DATABASE_URL`` naming a
        server that does not answer makes a gateway whose database is down).
    wsgiref:
        Serve with :mod:`tests.client.wsgi_server` (no migration check at start: the
        server for a database that is down) instead of ``runserver``.

    Raises
    ------
    RuntimeError
        If the server exits or does not answer within ``START_TIMEOUT_S``; its
        output is in the message.
    """
    port = free_port()
    log = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed below)
        "w+", prefix="jobqueue-gateway-", suffix=".log", delete=False
    )
    server_env = worker_env(
        {"JOBQUEUE_TEST_JOBQUEUE": json.dumps(dict(jobqueue or {})), **(env or {})}
    )
    command = (
        [sys.executable, "-m", "tests.client.wsgi_server", str(port)]
        if wsgiref
        else [
            sys.executable,
            "-m",
            "django",
            "runserver",
            "--noreload",
            "--skip-checks",
            f"127.0.0.1:{port}",
        ]
    )
    process = subprocess.Popen(  # noqa: S603 (our interpreter, our command)
        command,
        cwd=ROOT,
        env=server_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/sdk"
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the gateway server exited: {_output(log.name)}")
            # One request at a time, waiting as long as the deadline allows: a short
            # timeout abandoned slow answers and sent more, each a thread of the server
            # doing the same work, so a loaded machine never got its first answer.
            # A route without a token answers 401 (JSON) at once once the app is up.
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"the gateway server did not answer: {_output(log.name)}")
            try:
                if httpx.get(f"{url}/jobs/probe", timeout=left).status_code == 401:
                    break
            except httpx.TransportError:
                time.sleep(0.1)  # not listening yet
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        Path(log.name).unlink(missing_ok=True)


def _output(path: str) -> str:
    return Path(path).read_text(errors="replace")[-4000:]
