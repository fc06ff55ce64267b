"""Job ids (docs/design.md#ids): add, set, update, cancel, get and list.

An id names one job of a queue. Four calls act on it, and what each does depends on
the state of the job that holds the id (docs/design.md#ids):

=========================  =============  ==============  ======  ===============
the id's job is            ``add``        ``set``         update  ``cancel``
=========================  =============  ==============  ======  ===============
none                       adds it: True  adds it         False   False
scheduled or waiting       False          replaces value  True    removes it: True
                                          and time
running                    False          one run more    False   asks it to stop:
                                          after this one          True
failed, kept for ``keep``  False          starts it again False   removes it: True
                                          (attempt 1)
done, ``dedupe`` keeps it  False          adds it again   False   False
=========================  =============  ==============  ======  ===============

Stored statuses map onto those words: scheduled/waiting = ``init``/``retry`` (scheduled
while ``run_at`` is in the future), running = ``processing``, failed =
``error``/``max_retry``, done = ``done``. A hold past ``id_held_until`` counts as none,
and so does a ``cancelled`` job (a cancel ends the id's job, whatever the worker keeps
for display).

Atomicity. Each call runs under the creation lock of its (queue, id)
(:func:`django_jobqueue.store.locks.creation_lock`), so calls on one id are serialised with
each other and with ``enqueue_job(job_id=...)``. Workers never take that lock; against
them every change is a guarded ``UPDATE``/``DELETE`` that filters on the state read
(``waiting=True`` for a waiting job, ``processing`` and the lease token for a running
one), after the holder's row was read with ``SELECT ... FOR UPDATE``. A claim racing an
``update`` or ``cancel`` either wins (the call then sees a running job and answers
False, or True for ``cancel``'s stop request) or loses (the job runs with the new value,
or never runs). A ``set`` that loses to a claim becomes a rerun request, which
``storage.complete``/``fail``/``finish_cancelled`` honour with their own guarded update.

The package's parts:

- :mod:`.queue`: :class:`Queue` and its verbs, each run under the (queue, id) lock;
- :mod:`.holds`: the holder's locked lookup, its kind, and the guarded writes on it;
- :mod:`.pages`: what ``get`` and ``list`` show, state filters and page cursors.
"""

from __future__ import annotations

from .pages import DEFAULT_PAGE_JOBS, MAX_PAGE_BYTES, MAX_PAGE_JOBS, STATES, JobView, Page
from .queue import Queue

__all__ = [
    "DEFAULT_PAGE_JOBS",
    "MAX_PAGE_BYTES",
    "MAX_PAGE_JOBS",
    "STATES",
    "JobView",
    "Page",
    "Queue",
]
