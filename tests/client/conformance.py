"""What the conformance harness provides (clients/conformance/README.md): the languages
with a runner, their builds, the gateways of each scenario directory, the token roles,
and a proxy that sends every body as text/plain.

Only scripts/test's ``clients`` leg (``JOBQUEUE_TEST_CLIENTS=1``) runs the tests that use
it: they build every client with its toolchain, which the other legs do not install.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from django_jobqueue.store.apitokens import issue_token, revoke_token
from tests.workers_helpers import ROOT

from .live import free_port

CLIENTS = ROOT / "clients"
SCENARIOS = CLIENTS / "conformance" / "scenarios"
#: Each scenario directory's gateway (README "The gateways the harness provides").
SETUPS = ("default", "limited", "database-down", "text-plain")
#: The job types every conformance gateway declares.
JOB_TYPES = {
    "conformance.echo": {"queue": "conformance", "max_retry": 3},
    "conformance.spawn": {"queue": "conformance"},
    "conformance.secure": {"queue": "conformance", "secure": True},
    "conformance.sleep": {"queue": "conformance"},
}
GATEWAY_JOBQUEUE: dict[str, Any] = {
    "LEASE_MS": 30_000,
    "HEARTBEAT_MS": 500,
    "GATEWAY": {"CLAIM_POLL_MS": 100, "JOB_TYPES": JOB_TYPES},
}
LIMITED_JOBQUEUE: dict[str, Any] = {
    **GATEWAY_JOBQUEUE,
    "GATEWAY": {**GATEWAY_JOBQUEUE["GATEWAY"], "RATE_PER_MINUTE": 6, "MAX_BODY_BYTES": 2048},
}
#: A database nothing answers on (port 9, discard): every call is a 503.
DOWN_DATABASE_URL = "postgres://postgres@127.0.0.1:9/jobqueue_down"
#: Token roles: (scopes, queues); ``revoked`` is revoked once issued.
ROLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "all": (("produce", "read", "work", "admin"), ("*",)),
    "work": (("work", "produce", "read"), ("*",)),
    "produce": (("produce",), ("*",)),
    "read": (("read",), ("*",)),
    "narrow": (("produce", "read", "work"), ("cf-narrow-*",)),
    "work2": (("work",), ("*",)),
    "revoked": (("produce", "read", "work", "admin"), ("*",)),
}
#: Seconds a build may take (cargo and javac on a loaded machine).
BUILD_TIMEOUT_S = 900
#: Seconds one ``conformance run`` of a directory may take.
RUN_TIMEOUT_S = 300


def languages() -> list[str]:
    """Every language with an executable ``clients/<lang>/conformance``, sorted."""
    return sorted(
        path.parent.name
        for path in CLIENTS.glob("*/conformance")
        if path.is_file() and os.access(path, os.X_OK)
    )


def scenario_files(setup: str) -> list[Path]:
    """The scenario JSON files of one set-up's directory, sorted."""
    directory = SCENARIOS if setup == "default" else SCENARIOS / setup
    return sorted(directory.glob("*.json"))


def scenario_name(path: Path) -> str:
    return str(json.loads(path.read_text()).get("name") or path.stem)


_built: dict[str, str] = {}


def build(lang: str) -> None:
    """Run ``clients/<lang>/conformance build`` once per session.

    Fails the test (with the build's output) when it does not build: a missing
    toolchain is a failure, never a skip.
    """
    if lang in _built:
        if _built[lang]:
            pytest.fail(f"{lang} did not build:\n{_built[lang]}")
        return
    try:
        result = subprocess.run(  # noqa: S603
            [str(CLIENTS / lang / "conformance"), "build"],
            cwd=ROOT, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False,
        )  # fmt: skip
        output = "" if result.returncode == 0 else result.stdout + result.stderr
    except subprocess.TimeoutExpired as exc:
        output = f"timed out after {BUILD_TIMEOUT_S} s: {exc.stdout!r} {exc.stderr!r}"
    _built[lang] = output
    if output:
        pytest.fail(f"{lang} did not build:\n{output[-6000:]}")


def issue_roles(label: str) -> dict[str, str]:
    """Issue one token per role (README "Token roles"), named ``label-<role>``."""
    tokens = {}
    for role, (scopes, queues) in ROLES.items():
        name = f"{label}-{role}"
        tokens[role] = issue_token(name, queues=queues, scopes=scopes)[1]
        if role == "revoked":
            assert revoke_token(name) == 1
    return tokens


def runner_env(
    url: str, tokens_file: Path, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A runner's environment: ``JOBQUEUE_URL``, ``JOBQUEUE_TOKENS`` and ``extra``."""
    return {
        **os.environ,
        "JOBQUEUE_URL": url,
        "JOBQUEUE_TOKENS": str(tokens_file),
        **(extra or {}),
    }


def run_scenarios(lang: str, directory: Path, env: Mapping[str, str]) -> tuple[int, str]:
    """Run ``conformance run <directory>``; return its exit status and its output."""
    try:
        result = subprocess.run(  # noqa: S603
            [str(CLIENTS / lang / "conformance"), "run", str(directory)],
            cwd=ROOT, env=dict(env), capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        return -1, f"timed out after {RUN_TIMEOUT_S} s\n{exc.stdout!r}\n{exc.stderr!r}"
    return result.returncode, result.stdout + ("\n--- stderr ---\n" + result.stderr[-4000:])


def wait_for_rate_window(needed_s: float = 15) -> None:
    """Sleep until at least ``needed_s`` seconds are left in the current minute, so the
    limited scenarios' requests are counted in one rate window (auth.py counts a token's
    requests per wall-clock minute)."""
    left = 60 - time.time() % 60
    if left < needed_s:
        time.sleep(left + 0.5)


#: Headers the proxy sets itself rather than pass on.
_HOP_HEADERS = ("content-length", "transfer-encoding", "connection", "content-encoding")


class _TextPlainProxy(BaseHTTPRequestHandler):
    """Forward each request to ``upstream``, its body (if any) sent as text/plain."""

    upstream = ""
    protocol_version = "HTTP/1.1"

    def _forward(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {
            k: v
            for k, v in self.headers.items()
            if k.lower() not in ("host", "content-length", "content-type", "connection")
        }
        if body:
            headers["Content-Type"] = "text/plain"
        answer = httpx.request(
            self.command, self.upstream + self.path, content=body, headers=headers, timeout=60
        )
        self.send_response(answer.status_code)
        for key, value in answer.headers.items():
            if key.lower() not in _HOP_HEADERS:
                self.send_header(key, value)
        self.send_header("Content-Length", str(len(answer.content)))
        self.end_headers()
        self.wfile.write(answer.content)

    do_GET = do_POST = do_DELETE = do_PUT = _forward  # noqa: N815

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


@contextmanager
def text_plain_proxy(upstream: str) -> Iterator[str]:
    """A proxy in front of ``upstream`` (``http://127.0.0.1:PORT/sdk``); yield its URL."""
    origin, _, prefix = upstream.partition("://")[2].partition("/")
    handler = type("Proxy", (_TextPlainProxy,), {"upstream": f"http://{origin}"})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/{prefix}"
    finally:
        server.shutdown()
        server.server_close()
