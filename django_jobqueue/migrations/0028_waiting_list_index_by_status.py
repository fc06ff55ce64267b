"""The waiting list's index stated by status, so that no claim can read it, on PostgreSQL.

``jq_job_waiting_idx`` ``(id)`` gives the console's list of waiting jobs its order
(newest first). Its predicate was ``waiting``, the claim indexes' own, so the claim
(``waiting = TRUE AND run_at <= now() ... ORDER BY priority, run_at, id``) could read
it and sort: PostgreSQL chose that plan whenever its statistics said few jobs wait
(after an ``ANALYZE`` of a drained queue, the usual state of a queue that keeps up).
While a held snapshot keeps vacuum from removing dead index entries, that plan reads
the entry of every job enqueued since, each claim: the claim floor, which starts a
claim index's scan above them (docs/horizon.md), cannot help a scan of this one.
Measured with ``bench/horizon.py --rate 50 --garbage 500000`` (a trickle beside a held
snapshot and half a million dead entries): pickup p50 185 ms with this index as it
was, 7 ms without it (6 ms before the snapshot was held).

Its predicate becomes ``status IN ('init', 'retry')``: the same rows (``waiting`` is
true exactly for them, docs/design.md#states), which the waiting list states
(:func:`django_jobqueue.store.states.is_waiting`), and which the claim, stating only
``waiting``, does not imply. Built ``CONCURRENTLY`` under a new name, then swapped
(0027's procedure, which also waits for a stopped run's index statement).
PostgreSQL only, as 0024.
"""

import importlib
from typing import Any

from django.db import migrations

NAME = "jq_job_waiting_idx"
BEFORE = "waiting"
AFTER = "status IN ('init', 'retry')"

_indexes = importlib.import_module("django_jobqueue.migrations.0027_job_hot_path_indexes")


def _rebuild(predicate: str) -> Any:
    def run(apps: Any, schema_editor: Any) -> None:
        if schema_editor.connection.vendor != "postgresql":
            return
        table = _indexes._table(apps, schema_editor)
        _indexes._wait_for_other_builds(schema_editor, table)
        _indexes._swap(schema_editor, table, NAME, "(id)", predicate)

    return run


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY runs outside a transaction

    dependencies = [
        ("django_jobqueue", "0027_job_hot_path_indexes"),
    ]

    operations = [migrations.RunPython(_rebuild(AFTER), _rebuild(BEFORE), elidable=False)]
