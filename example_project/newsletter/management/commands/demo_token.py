"""Create (or reuse) the demo's gateway token and print a curl line that uses it."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from django_jobqueue.store.apitokens import authenticate, issue_token, revoke_token

#: The name of the demo's token (``manage.py jobqueue token list`` shows it).
NAME = "demo"
#: The job the printed curl line enqueues: the editors' digest mail.
CURL_JOB = {"queue": "emails", "job_type": "newsletter.daily_digest", "payload": {}}


def token_file() -> Path:
    """Where the demo keeps its token's text: ``example_project/var/demo-token``."""
    return Path(settings.BASE_DIR) / "example_project" / "var" / "demo-token"


def demo_token() -> str:
    """Return the demo token's text: the one in :func:`token_file` while the database
    still accepts it, else a new one (produce and read, on every queue) written there.
    The database stores only its hash; the file is what makes it printable again."""
    path = token_file()
    if path.exists():
        text = path.read_text().strip()
        if text and authenticate(text) is not None:
            return text
    revoke_token(NAME)
    _row, text = issue_token(NAME, queues=["*"], scopes=["produce", "read"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    path.chmod(0o600)
    return text


def curl_line(token: str, port: int) -> str:
    """Return the curl command that enqueues :data:`CURL_JOB` through the gateway."""
    return (
        f"curl -H 'Authorization: Bearer {token}' -H 'Content-Type: application/json' "
        f"-d '{json.dumps(CURL_JOB)}' http://127.0.0.1:{port}/sdk/jobs"
    )


class Command(BaseCommand):
    help = (
        "Create the demo's gateway token (or reuse the one in example_project/var/demo-token) "
        "and print a curl line that enqueues a job with it. For demos only."
    )

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--port", type=int, default=8000, help="Default %(default)r.")

    def handle(self, *args: Any, port: int, **options: Any) -> None:
        self.stdout.write(curl_line(demo_token(), port))
