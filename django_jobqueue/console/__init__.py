"""The operators' console: staff-only pages over the job table.

Mount it in the site's ``urls.py``::

    path("console/", include("django_jobqueue.console.urls"))

Core pages: overview, jobs, a job, workers, schedules, and the actions retry, cancel,
delete (one job or one page of them) and pause/resume. Pro pages (``pro/...``) answer
404 without a valid licence: unique locks, the dedupe audit, bulk operations over a
whole filter.
"""
