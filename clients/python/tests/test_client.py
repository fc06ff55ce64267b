"""The client on its own: its version, its imports, the errors it raises before or
without any answer, and (with ``JQ_TEST_URL`` and ``JQ_TEST_TOKEN`` naming a live
gateway and a token with the produce, read and work scopes) a producer's round trip.

Plain ``unittest``: the server's tests/client/test_without_django.py runs this
directory in a virtualenv that has this package and httpx, and nothing else.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import socket
import subprocess
import sys
import unittest

import httpx
import jobqueue_client
from jobqueue_client import Client, GatewayUnreachable, NotFound
from jobqueue_client.producer import _headers

LIVE_URL = os.environ.get("JQ_TEST_URL", "")
LIVE_TOKEN = os.environ.get("JQ_TEST_TOKEN", "")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class VersionTests(unittest.TestCase):
    def test_version__is_the_installed_distributions(self) -> None:
        installed = importlib.metadata.version("django-jobqueue-client")
        self.assertEqual(jobqueue_client.__version__, installed)
        self.assertNotEqual(jobqueue_client.__version__, "django-jobqueue-client")
        self.assertRegex(installed, r"^\d+\.\d+")

    def test_version__is_sent_as_the_user_agent(self) -> None:
        agent = _headers("jqt_x")["User-Agent"]
        self.assertEqual(agent, f"django-jobqueue-client/{jobqueue_client.__version__}")


class ImportTests(unittest.TestCase):
    def test_import__loads_nothing_of_django(self) -> None:
        code = (
            "import sys, jobqueue_client, jobqueue_client.cli\n"
            "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
        )
        self.assertEqual(done.stdout.strip(), "[]")

    def test_import__the_only_dependency_is_httpx(self) -> None:
        requires = importlib.metadata.requires("django-jobqueue-client") or []
        names = {
            r.split(">")[0].split("=")[0].split("<")[0].split(";")[0].strip() for r in requires
        }
        self.assertEqual(names, {"httpx"})


class ErrorsWithoutAnAnswerTests(unittest.TestCase):
    def test_enqueue__an_unknown_option_is_a_type_error_before_any_request(self) -> None:
        def refuse(request: httpx.Request) -> httpx.Response:
            raise AssertionError(f"no request expected, got {request.url}")

        http = httpx.Client(transport=httpx.MockTransport(refuse))
        with Client("http://gateway.invalid/sdk", "jqt_x", http=http) as jq:
            with self.assertRaisesRegex(TypeError, "priorty"):
                jq.enqueue("gw.echo", {}, priorty=3)  # type: ignore[call-arg]
        http.close()

    def test_url__the_sites_root_means_its_sdk_and_a_path_is_kept(self) -> None:
        seen: list[str] = []
        bodies: list[object] = []

        def record(request: httpx.Request) -> httpx.Response:
            seen.append(str(request.url))
            bodies.append(json.loads(request.content))
            return httpx.Response(200, json={"status": "enqueued", "jid": "0" * 32})

        http = httpx.Client(transport=httpx.MockTransport(record))
        for url in ("http://gw.invalid:8000", "http://gw.invalid:8000/", "http://gw.invalid:8000/sdk/",
                    "http://gw.invalid:8000/jobs-api"):  # fmt: skip
            Client(url, "jqt_x", http=http).enqueue("gw.echo", {}, limit_key="k", after=("a",))
        http.close()
        self.assertEqual(
            seen,
            ["http://gw.invalid:8000/sdk/jobs"] * 3 + ["http://gw.invalid:8000/jobs-api/jobs"],
        )
        # A tuple of upstream jids is sent as a JSON array, with the limit's key.
        self.assertEqual(
            bodies[0],
            {"job_type": "gw.echo", "payload": {}, "limit_key": "k", "after": ["a"]},
        )

    def test_errors__no_server_is_gateway_unreachable(self) -> None:
        with Client(f"http://127.0.0.1:{free_port()}/sdk", "jqt_x", timeout=2) as jq:
            with self.assertRaises(GatewayUnreachable) as unreachable:
                jq.get_job("0" * 26)
        self.assertIsNone(unreachable.exception.status)
        # The message names the URL that did not answer, not a missing status.
        text = str(unreachable.exception)
        self.assertTrue(text.startswith("unreachable: http://127.0.0.1:"), text)
        self.assertIn("/sdk/jobs/", text)


@unittest.skipUnless(LIVE_URL and LIVE_TOKEN, "JQ_TEST_URL and JQ_TEST_TOKEN name no gateway")
class LiveProducerTests(unittest.TestCase):
    def test_enqueue_get_and_cancel(self) -> None:
        with Client(LIVE_URL, LIVE_TOKEN) as jq:
            enqueued = jq.enqueue("gw.echo", {"from": "no-django"}, queue="nodj-p", delay="1h")
            job = jq.get_job(enqueued.jid)
            self.assertEqual(
                (job.jid, job.payload, job.state, job.queue),
                (enqueued.jid, {"from": "no-django"}, "scheduled", "nodj-p"),
            )
            cancelled = jq.cancel(enqueued.jid)
            self.assertTrue(cancelled.cancelled)
            self.assertEqual(jq.get_job(enqueued.jid).state, "cancelled")
            with self.assertRaises(NotFound):
                jq.get_job("0" * 26)


if __name__ == "__main__":
    unittest.main()
