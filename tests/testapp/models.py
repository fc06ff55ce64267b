"""Models of the test suite: a side table that records every handler run."""

from __future__ import annotations

from django.db import models


class RunRecord(models.Model):
    """One run of a handler, written by test job types to count runs per job.

    ``jid`` is the job's jid, ``label`` a free tag set by the test (a job type,
    a step, an order number), ``attempt`` the job's attempt and ``worker`` the
    lease owner that ran it.
    """

    jid = models.CharField(max_length=32, db_index=True)
    label = models.CharField(max_length=200, blank=True, default="")
    attempt = models.PositiveIntegerField(default=0)
    worker = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["pk"]

    def __str__(self) -> str:
        return f"{self.label} {self.jid} #{self.attempt}"
