"""Signals sent by the workers, and the receivers the app connects.

``job_started(sender=job_type, job=Job)`` before a handler runs, and
``job_finished(sender=job_type, job=Job, status=str)`` after its outcome is stored.

Connect a receiver without ``sender=`` and test ``job.job_type`` in it: Django
matches a connected sender by identity (``id()``), and the job type string a worker
sends is read from the job's row, never the very string object in your code, so
``connect(receiver, sender="emails.send")`` is never called.
"""

from __future__ import annotations

from django.dispatch import Signal

__all__ = ["job_finished", "job_started"]

#: Sent by a worker before it runs a job's handler.
job_started = Signal()
#: Sent by a worker after a job's outcome (done, retry, dead, cancelled) is stored.
job_finished = Signal()
