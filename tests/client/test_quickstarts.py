"""Each client's README quick start, pasted as a new user would: its "in a fresh
directory" shell block runs in an empty temporary directory against a live gateway
that knows ``hello.greet`` (the gateway the README's first block starts), and must
run the job it enqueues and print its result.

The block is read from ``clients/<lang>/README.md`` (its ``## Quick start`` section,
the last ``sh`` block), never copied here, so a README that drifts from its client
fails. ``JQ_REPO``, ``JQ_URL`` (the site's root) and ``JQ_TOKEN`` are set as the
README's first block sets them. Only scripts/test's ``clients`` leg runs these: it
installs the toolchains; a quick start that does not run fails, never skips.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from django_jobqueue.models import Job, JobStatus
from django_jobqueue.store.apitokens import issue_token
from tests.workers_helpers import ROOT

from . import conformance as cf
from .live import live_gateway

pytestmark = [
    pytest.mark.clients,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        not os.environ.get("JOBQUEUE_TEST_CLIENTS"),
        reason="the clients' quick starts run in scripts/test's clients leg only",
    ),
]

#: The gateway every quick start's first block describes.
QUICKSTART_JOBQUEUE = {
    "LEASE_MS": 30_000,
    "HEARTBEAT_MS": 500,
    "GATEWAY": {"CLAIM_POLL_MS": 100, "JOB_TYPES": {"hello.greet": {"queue": "hello"}}},
}
#: Seconds one quick start may take: Rust's builds its crates in a new target/.
RUN_TIMEOUT_S = 900
SECTION = re.compile(r"^## Quick start\n(.*?)(?=^## |\Z)", re.MULTILINE | re.DOTALL)
SH_BLOCK = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)


def fresh_directory_block(lang: str) -> str:
    """The shell block a new user pastes into a fresh directory (README, Quick start)."""
    readme = (cf.CLIENTS / lang / "README.md").read_text()
    section = SECTION.search(readme)
    assert section, f"clients/{lang}/README.md has no '## Quick start' section"
    blocks = list(SH_BLOCK.finditer(section.group(1)))
    assert blocks, f"clients/{lang}/README.md: its quick start has no sh block"
    last = blocks[-1]
    assert "fresh directory" in section.group(1)[: last.start()], (
        f"clients/{lang}/README.md: its quick start's last sh block is not the one for "
        "a fresh directory"
    )
    return last.group(1)


@pytest.fixture(scope="module")
def gateway_root(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """The site's root (``JQ_URL``) of a gateway that knows ``hello.greet``."""
    with django_db_blocker.unblock(), live_gateway(QUICKSTART_JOBQUEUE) as url:
        yield url.removesuffix("/sdk")


@pytest.mark.parametrize("lang", cf.languages())
def test_quick_start_runs_a_job_in_a_fresh_directory(lang, gateway_root, tmp_path):
    script = fresh_directory_block(lang)
    scopes = ["produce", "read", "work"]
    token = issue_token(f"quickstart-{lang}", queues=["hello"], scopes=scopes)[1]
    before = set(Job.objects.filter(job_type="hello.greet").values_list("jid", flat=True))
    env = {**os.environ, "JQ_REPO": str(ROOT), "JQ_URL": gateway_root, "JQ_TOKEN": token}
    for name in ("JOBQUEUE_URL", "JOBQUEUE_TOKEN", "JOBQUEUE_TOKENS", "DJANGO_SETTINGS_MODULE"):
        env.pop(name, None)  # a new user's shell has none of the harness's
    try:
        result = subprocess.run(  # noqa: S603
            ["bash", "-e", "-o", "pipefail", "-c", script],  # noqa: S607
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
            check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{lang} quick start timed out after {RUN_TIMEOUT_S} s: {exc.stderr!r}")
    output = f"exit status {result.returncode}\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    assert result.returncode == 0, f"{lang} quick start failed: {output[-6000:]}"
    new = Job.objects.filter(job_type="hello.greet").exclude(jid__in=before)
    assert [(j.queue, j.status, j.result) for j in new] == [
        ("hello", JobStatus.DONE, {"greeting": "Hello, Ada"})
    ], f"{lang}: {output[-3000:]}"
    assert "Hello, Ada" in result.stdout.splitlines()[-1], f"{lang}: {output[-3000:]}"
