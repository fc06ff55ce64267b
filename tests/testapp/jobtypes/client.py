"""Job types of the client tests (tests/client/): the runworkers side of the mixed test."""

from __future__ import annotations

from django_jobqueue import job
from tests.testapp.models import RunRecord

#: The queue runworkers serves in tests/client/test_mixed.py.
QUEUE = "mix-py"


@job("mix.py", queue=QUEUE, max_retry=3)
def mixed_python(payload, ctx):
    """Record the run in the side table (RunRecord, label ``runworkers``)."""
    RunRecord.objects.create(
        jid=ctx.jid, label="runworkers", attempt=ctx.attempt, worker=ctx.worker
    )
    return payload
