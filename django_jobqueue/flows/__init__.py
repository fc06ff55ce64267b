"""Batches and workflows (docs/workflows.md): jobs grouped, ordered and awaited.

Modules, in the create-and-transition layer beside :mod:`django_jobqueue.enqueue`
and :mod:`django_jobqueue.storage` (docs/design.md#layers):

- ``current``: the ``with batch()`` block open in this context, if any (a leaf);
- ``links``: a new job joined to a batch or a workflow, and its upstream edges;
- ``batches``: ``batch()``, ``get_batch()`` and the handle of an open batch;
- ``graph``: the ``Workflow`` builder (steps, edges, cycle check, enqueue);
- ``canvas``: ``Signature`` (``handle.s()``), ``chain``, ``group``, ``chord``;
- ``results``: ``ctx.upstream``, the results of a job's upstream jobs;
- ``endings``: what a job's end does to its batch, workflow and dependents, in
  the transaction of that end;
- ``hooks``: the one call each terminal write of storage, the reaper and the
  operators' actions makes into ``endings``;
- ``reopen``: a retried dead letter takes its end back and resumes its workflow;
- ``repair``: the housekeeping pass that makes right, once, what a restored backup
  or a row changed by hand left stranded.
"""
