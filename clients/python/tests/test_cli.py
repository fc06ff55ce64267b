"""``jobqueue-worker`` as a real process: its usage errors (exit status 2), its
version, a stop before the gateway ever answered, and (with ``JQ_TEST_URL`` and
``JQ_TEST_TOKEN``) a refused token (exit status 1).

Draining jobs and SIGTERM with jobs running are tested with a database to look at,
by the server's tests/client/test_without_django.py.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

import jobqueue_client

LIVE_URL = os.environ.get("JQ_TEST_URL", "")
LIVE_TOKEN = os.environ.get("JQ_TEST_TOKEN", "")

#: Seconds a process may take to start and answer.
TIMEOUT_S = 60

HANDLERS = textwrap.dedent(
    """
    def echo(payload, ctx):
        return payload

    HANDLERS = {"gw.echo": echo}
    handlers = {"gw.other": echo}
    NOT_A_MAPPING = [echo]
    NOT_CALLABLE = {"gw.echo": 42}
    EMPTY = {}
    """
)


def run_cli(*args: str, cwd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m jobqueue_client ARGS`` (the console script's code) to its end."""
    return subprocess.run(
        [sys.executable, "-m", "jobqueue_client", *args],
        cwd=cwd,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


class UsageTests(unittest.TestCase):
    def setUp(self) -> None:
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        Path(self.dir.name, "myhandlers.py").write_text(HANDLERS)
        self.base = ["--url", "http://127.0.0.1:9/sdk", "--token", "jqt_x", "--queues", "q"]

    def usage_error(self, *args: str, env: dict[str, str] | None = None) -> str:
        done = run_cli(*args, cwd=self.dir.name, env=env)
        self.assertEqual(done.returncode, 2, done.stderr)
        self.assertIn("usage: jobqueue-worker", done.stderr)
        return done.stderr

    def test_usage__each_required_option_is_named_with_its_variable(self) -> None:
        self.assertIn("--handlers (or JQ_HANDLERS) is required", self.usage_error(*self.base))
        err = self.usage_error("--handlers", "myhandlers", "--queues", "q")
        self.assertIn("--url (or JQ_URL) is required", err)
        err = self.usage_error("--handlers", "myhandlers", "--url", "http://x", "--queues", "q")
        self.assertIn("--token (or JQ_TOKEN) is required", err)
        err = self.usage_error("--handlers", "myhandlers", "--url", "http://x", "--token", "t")
        self.assertIn("--queues (or JQ_QUEUES) is required", err)
        self.assertIn(
            "at least one queue", self.usage_error(*self.base, "--handlers", "m", "--queues", " , ")
        )

    def test_usage__a_bad_number_or_unknown_option(self) -> None:
        self.assertIn("must be at least 1", self.usage_error(*self.base, "--concurrency", "0"))
        self.assertIn("must be an integer", self.usage_error(*self.base, "--wait-ms", "soon"))
        self.assertIn(
            "unrecognized arguments: --queue", self.usage_error(*self.base, "--queue", "x")
        )
        err = self.usage_error(*self.base, "--handlers", "myhandlers", env={"JQ_CONCURRENCY": "x"})
        self.assertIn("must be an integer", err)

    def test_usage__a_url_or_lease_the_gateway_could_never_take(self) -> None:
        # Each would otherwise be retried forever: no scheme never connects, and the
        # gateway refuses a lease outside its bounds at every claim.
        base = ["--handlers", "myhandlers", "--token", "jqt_x", "--queues", "q"]
        err = self.usage_error(*base, "--url", "127.0.0.1:8000")
        self.assertIn("must be http:// or https:// with a host, got '127.0.0.1:8000/sdk'", err)
        err = self.usage_error(*base, "--url", "ftp://127.0.0.1/sdk")
        self.assertIn("must be http:// or https://", err)
        for lease in ("500", "86400001"):
            err = self.usage_error(*self.base, "--handlers", "myhandlers", "--lease-ms", lease)
            bounds = "lease_ms must be between 1000 and 86400000 (the gateway's bounds)"
            self.assertIn(f"{bounds}, got {lease}", err)

    def test_usage__a_handler_module_that_is_missing_or_holds_no_handlers(self) -> None:
        self.assertIn(
            "no module named 'nosuch'", self.usage_error(*self.base, "--handlers", "nosuch")
        )
        self.assertIn("no file", self.usage_error(*self.base, "--handlers", "./nosuch.py"))
        err = self.usage_error(*self.base, "--handlers", "myhandlers:MISSING")
        self.assertIn("myhandlers has no MISSING", err)
        err = self.usage_error(*self.base, "--handlers", "myhandlers:NOT_A_MAPPING")
        self.assertIn("is list, not a non-empty mapping", err)
        err = self.usage_error(*self.base, "--handlers", "myhandlers:EMPTY")
        self.assertIn("is dict, not a non-empty mapping", err)
        err = self.usage_error(*self.base, "--handlers", "myhandlers:NOT_CALLABLE")
        self.assertIn("the handler of 'gw.echo' is not callable", err)

    def test_handlers__a_module_failing_on_import_is_exit_status_1(self) -> None:
        Path(self.dir.name, "broken.py").write_text("import nosuchpackage\n")
        done = run_cli(*self.base, "--handlers", "broken", cwd=self.dir.name)
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("importing broken failed", done.stderr)
        self.assertIn("No module named 'nosuchpackage'", done.stderr)

    def test_version_and_help(self) -> None:
        done = run_cli("--version", cwd=self.dir.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(
            done.stdout.strip(), f"django-jobqueue-client {jobqueue_client.__version__}"
        )
        done = run_cli("--help", cwd=self.dir.name)
        self.assertEqual(done.returncode, 0, done.stderr)
        for option in ("--handlers", "--queues", "--concurrency", "--url", "--token", "JQ_URL"):
            self.assertIn(option, done.stdout)


class StopTests(unittest.TestCase):
    def test_sigterm__before_the_gateway_answered_exits_0(self) -> None:
        """An unreachable gateway is tried again (it may be starting too); a SIGTERM
        meanwhile ends the process at once, status 0."""
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "myhandlers.py").write_text(HANDLERS)
            with tempfile.TemporaryFile("w+") as err:
                process = subprocess.Popen(
                    [sys.executable, "-m", "jobqueue_client", "--handlers", "myhandlers"],
                    cwd=directory,
                    env={
                        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                        # The environment's names, as the TypeScript worker reads them.
                        "JQ_URL": f"http://127.0.0.1:{free_port()}",
                        "JQ_TOKEN": "jqt_x",
                        "JQ_QUEUES": "q",
                    },
                    stderr=err,
                    text=True,
                )
                try:
                    deadline = time.monotonic() + TIMEOUT_S
                    while "cannot register yet" not in _read(err):
                        self.assertIsNone(process.poll(), _read(err))
                        self.assertLess(time.monotonic(), deadline, _read(err))
                        time.sleep(0.05)
                    process.send_signal(signal.SIGTERM)
                    self.assertEqual(process.wait(TIMEOUT_S), 0, _read(err))
                finally:
                    if process.poll() is None:
                        process.kill()
                        process.wait()
                text = _read(err)
        self.assertIn("SIGTERM received", text)
        self.assertIn("stopped before registering", text)


@unittest.skipUnless(LIVE_URL and LIVE_TOKEN, "JQ_TEST_URL and JQ_TEST_TOKEN name no gateway")
class RefusedTests(unittest.TestCase):
    def test_a_refused_token_is_exit_status_1(self) -> None:
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "myhandlers.py").write_text(HANDLERS)
            done = run_cli(
                "--handlers", "myhandlers", "--queues", "q", "--url", LIVE_URL,
                "--token", "jqt_not_a_token", cwd=directory,
            )  # fmt: skip
        self.assertEqual(done.returncode, 1, done.stderr)
        self.assertIn("jobqueue-worker: ERROR the gateway refused the worker: 401", done.stderr)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read(file) -> str:
    file.seek(0)
    return file.read()


if __name__ == "__main__":
    unittest.main()
