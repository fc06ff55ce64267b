"""Who may see and do what in the console: staff only, one permission per action."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.views import redirect_to_login
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import render
from django.urls import reverse

from ..store.licence import is_pro

__all__ = [
    "LICENCE_DOCS_URL",
    "PERMISSIONS",
    "PRO_FEATURES",
    "log_action",
    "pro_only",
    "staff_required",
]

#: The permission each console action needs (``django_jobqueue.<codename>``).
PERMISSIONS = {
    "retry": "django_jobqueue.retry_job",
    "cancel": "django_jobqueue.cancel_job",
    "delete": "django_jobqueue.delete_job",
    "pause": "django_jobqueue.pause_queue",
    "resume": "django_jobqueue.pause_queue",
    # Flow-control limits throttle queues as pauses stop them: the same permission.
    "limit": "django_jobqueue.pause_queue",
    "schedule": "django_jobqueue.manage_schedule",
    "release": "django_jobqueue.change_job",
}

View = Callable[..., HttpResponse]


def _has_nul(request: HttpRequest, kwargs: dict[str, Any]) -> bool:
    """Whether a path parameter, a query or a form value holds a NUL character."""
    values = [str(value) for value in kwargs.values()]
    for data in (request.GET, request.POST):
        for key in data:
            values.append(key)
            values.extend(data.getlist(key))
    return any("\x00" in value for value in values)


def staff_required(permission: str | None = None) -> Callable[[View], View]:
    """Wrap a view: anonymous users go to the admin login, non-staff get 403.

    ``permission``, when given, names a :data:`PERMISSIONS` key the user must also
    hold (else 403); superusers hold every permission.
    """

    def decorate(view: View) -> View:
        @functools.wraps(view)
        def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            user = request.user
            if not user.is_authenticated:
                return redirect_to_login(request.get_full_path(), reverse("admin:login"))
            if not (user.is_active and user.is_staff):
                raise PermissionDenied("The console is for staff.")
            if permission is not None and not user.has_perm(PERMISSIONS[permission]):
                raise PermissionDenied(f"This needs the {PERMISSIONS[permission]} permission.")
            if _has_nul(request, kwargs):
                # No stored name or id holds one (and PostgreSQL text cannot): such a
                # request names nothing, and would fail in the database as a 500.
                return HttpResponseBadRequest("A NUL character names no queue, job or plan.")
            return view(request, *args, **kwargs)

        return wrapped

    return decorate


#: The Pro feature each Pro view belongs to, as its page without a licence names it.
PRO_FEATURES = {
    "locks": "Unique locks",
    "release_lock": "Unique locks",
    "dedupe": "Dedupe audit",
    "bulk": "Bulk operations",
}
#: Where the licence is explained: the README's "Core and Pro" (docs/licence.md in full).
LICENCE_DOCS_URL = "https://pypi.org/project/django-jobqueue/#core-and-pro"


def pro_only(view: View) -> View:
    """Wrap a view so it answers 404 unless a valid Pro licence is installed.

    The 404 is a page of the console's own (not Django's debug page) that names the
    Pro feature (:data:`PRO_FEATURES`) and links to the licence docs
    (docs/design.md#core-and-pro).
    """
    feature = PRO_FEATURES.get(view.__name__, "This page")

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not is_pro():
            return render(
                request,
                "django_jobqueue/console/pro_required.html",
                {
                    "title": f"{feature} (Pro)",
                    "site_header": "django-jobqueue",
                    "has_permission": bool(getattr(request.user, "is_staff", False)),
                    "is_pro": False,
                    "can": {},
                    "feature": feature,
                    "licence_docs_url": LICENCE_DOCS_URL,
                },
                status=404,
            )
        return view(request, *args, **kwargs)

    return wrapped


def log_action(
    request: HttpRequest,
    model: type[Model],
    message: str,
    *,
    obj: Model | None = None,
    flag: int = CHANGE,
) -> None:
    """Write one entry of Django's admin log for a console action by ``request.user``.

    ``obj`` is the object acted on; None for an action on a selection or a queue
    (the message then says what was acted on). Never put a payload in ``message``.
    """
    LogEntry.objects.create(
        user_id=request.user.pk,  # type: ignore[misc]
        content_type=ContentType.objects.get_for_model(model),
        object_id=None if obj is None else str(obj.pk),
        object_repr=(str(obj) if obj is not None else str(model._meta.verbose_name_plural))[:200],
        action_flag=flag,
        change_message=message,
    )
