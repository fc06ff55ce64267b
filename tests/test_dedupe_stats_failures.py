"""Deduplicated counts when their write fails, and at the process's exit (workerstats)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.db import connection

from django_jobqueue import enqueue_job
from django_jobqueue.models import JobStat
from django_jobqueue.store.workerstats import create_stats
from tests.test_dedupe_stats import deduplicated
from tests.workers_helpers import worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def _rename(old: str, new: str) -> None:
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER TABLE {quote(old)} RENAME TO {quote(new)}")


def test_a_failing_write__never_fails_the_enqueue_and_keeps_the_counts(monkeypatch, caplog):
    monkeypatch.setattr(create_stats, "flush_s", 0.0)  # every count is due at once
    monkeypatch.setattr(create_stats, "flush_timer", False)  # written by the next count
    table = JobStat._meta.db_table
    assert enqueue_job("unique", "unique.opt", {}, unique_key="k")["status"] == "enqueued"
    _rename(table, f"{table}_away")  # the upsert now fails on the server
    try:
        for _ in range(3):
            assert enqueue_job("unique", "unique.opt", {}, unique_key="k").deduplicated
    finally:
        _rename(f"{table}_away", table)
    assert "writing job statistics failed" in caplog.text
    assert create_stats.pending("default") >= 1
    assert enqueue_job("unique", "unique.opt", {}, unique_key="k").deduplicated
    assert deduplicated("unique", "unique.opt") == 4  # the failed three and the fourth
    assert create_stats.pending("default") == 0


def test_counts_not_yet_due__are_written_at_the_processs_exit() -> None:
    code = (
        "import django; django.setup()\n"
        "from django_jobqueue import enqueue_job\n"
        "from django_jobqueue.store.workerstats import create_stats\n"
        "create_stats.flush_s = 3600.0\n"
        "enqueue_job('unique', 'unique.opt', {}, unique_key='exit')\n"
        "for _ in range(5):\n"
        "    assert enqueue_job('unique', 'unique.opt', {}, unique_key='exit').deduplicated\n"
        "assert create_stats.pending('default') == 1\n"
    )
    env = {**worker_env(), "DJANGO_SETTINGS_MODULE": "tests.settings"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=120)
    assert deduplicated("unique", "unique.opt") == 5
