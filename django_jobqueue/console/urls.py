"""Console URLs: ``path("console/", include("django_jobqueue.console.urls"))``.

A queue or schedule name is matched with the ``path`` converter: every stored name
reverses and resolves, including one with ``/`` stored before the queue-name rule
(docs/gateway.md "Queue names") refused it; ``reverse`` percent-encodes the rest.
"""

from __future__ import annotations

from django.urls import path

from . import actions, flowpages, limits, plans, pro, progress, views

app_name = "django_jobqueue_console"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("jobs/", views.job_list, name="jobs"),
    path("progress/", progress.progress, name="progress"),
    path("jobs/selection/", actions.selection, name="selection"),
    path("jobs/<str:jid>/", views.job_detail, name="job"),
    path("jobs/<str:jid>/<str:action>/", actions.job_action, name="job_action"),
    path("pause-queue/", actions.pause_named, name="pause_named"),
    path("queues/<path:queue>/<str:action>/", actions.queue_action, name="queue_action"),
    path("batches/<int:batch_id>/", flowpages.batch_detail, name="batch"),
    path("workflows/<int:workflow_id>/", flowpages.workflow_detail, name="workflow"),
    path("workers/", views.workers, name="workers"),
    path("schedules/", views.schedules, name="schedules"),
    path("schedules/new/", plans.schedule_new, name="schedule_new"),
    path("schedule/<path:name>", plans.schedule_detail, name="schedule"),
    path("audit/", views.audit_log, name="audit"),
    path("limits/", limits.limits_page, name="limits"),
    path("limits/set/", limits.limit_set, name="limit_set"),
    path("limits/clear/", limits.limit_clear, name="limit_clear"),
    path("schedules/<path:name>/<str:action>/", actions.schedule_action, name="schedule_action"),
    path("pro/locks/", pro.locks, name="locks"),
    path("pro/locks/<str:jid>/release/", pro.release_lock, name="release_lock"),
    path("pro/dedupe/", pro.dedupe, name="dedupe"),
    path("pro/bulk/", pro.bulk, name="bulk"),
]
