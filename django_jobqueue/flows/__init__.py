"""Batches and workflows (docs/workflows.md): jobs grouped, ordered and awaited.

Modules, in the create-and-transition layer beside :mod:`django_jobqueue.enqueue`
and :mod:`django_jobqueue.storage` (docs/design.md#layers):

- ``current``: the ``with batch()`` block open in this context, if any (a leaf);
- ``links``: a new job joined to a batch or a workflow, and its upstream edges;
- ``batches``: ``batch()``, ``get_batch()`` and the handle of an open batch;
- ``graph``: the ``Workflow`` builder (steps, edges, cycle check, enqueue);
- ``canvas``: ``Signature`` (``handle.s()``), ``chain``, ``group``, ``chord``;
- ``endings``: what a job's end does to its batch, workflow and dependents, in
  the transaction of that end;
- ``repair``: the housekeeping pass that finishes what a crash left undone.
"""
