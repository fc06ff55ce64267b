"""The HTTP SDK gateway (docs/design.md#gateway): producers and workers in any language, over JSON.

Mount it in the site's ``urls.py``::

    path("sdk/", include("django_jobqueue.gateway.urls"))

It needs the ``gateway`` extra (django-ninja, pydantic v2). A surface: it calls the
producer verbs (``enqueue``, ``ids``), the worker's ``storage`` functions and
``maintenance``, and nothing below imports it. The route table, the JSON shapes and the
status codes are in ``docs/gateway.md``.

Parts: :mod:`.api` (the NinjaAPI and its routers), :mod:`.auth` (bearer tokens, scopes,
queues, rate), :mod:`.errors` (one code-to-status table), :mod:`.body` (size and JSON
checks), :mod:`.schemas`, and the routes: :mod:`.jobs`, :mod:`.queues` (docs/design.md#ids),
:mod:`.workers` (the worker protocol, with :mod:`.waiting` for the long-poll), and
:mod:`.pro`. :mod:`.jobtypes` describes the job types gateway workers run; it imports
no django-ninja, so ``apps.py`` registers it whether or not the extra is installed.
"""
