"""A client worker process for the SIGTERM test: no Django, only the client.

    python tests/client/worker_script.py URL TOKEN QUEUE RECORD_FILE

Runs ``gw.echo`` jobs with 2 threads; each handler appends ``start <jid>`` to the
record file, sleeps 1.5 s, appends ``end <jid>`` and returns its payload. Exits 0
after a graceful stop, printing the worker's stats as JSON.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from django_jobqueue.client import Worker


def main(url: str, token: str, queue: str, record: str) -> None:
    path = Path(record)

    def echo(payload, ctx):
        with path.open("a") as out:
            out.write(f"start {ctx.jid}\n")
        time.sleep(1.5)
        with path.open("a") as out:
            out.write(f"end {ctx.jid}\n")
        return payload

    worker = Worker(
        {"gw.echo": echo}, url=url, token=token, queues=[queue], concurrency=2, wait_ms=1_000
    )
    print(json.dumps(worker.run()), flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
