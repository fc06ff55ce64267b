"""Job types of the gateway tests (tests/gateway/)."""

from __future__ import annotations

from django_jobqueue import job

#: The queue of the gateway tests' job types.
QUEUE = "gw"


@job("gw.echo", queue=QUEUE)
def echo(payload, ctx):
    """Return the payload."""
    return payload


@job("gw.secret", queue="gw-secure", secure=True)
def secret(payload, ctx):
    """A secure job type: its payload and result are never shown."""
    return {"ok": True}
