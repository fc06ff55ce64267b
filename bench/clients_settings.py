"""The example project's settings plus the conformance job types (clients/conformance/
README.md), for bench/gateway_clients.py's gunicorn: every client's ``conformance worker``
runs ``conformance.echo`` jobs."""

from example_project.settings import *  # noqa: F403
from example_project.settings import JOBQUEUE

JOBQUEUE = {
    **JOBQUEUE,
    "GATEWAY": {
        "JOB_TYPES": {
            "conformance.echo": {"queue": "bench-clients"},
            "conformance.spawn": {"queue": "bench-clients"},
        },
    },
}
