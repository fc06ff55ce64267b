"""The console's limits page (docs/limits.md "Visibility"): each flow-control limit with
its use (in flight / concurrency, due jobs, the busiest keys), and forms to set and
clear a limit at run time (the ``pause_queue`` permission; written to the audit log)."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_POST

from ..core.exceptions import InvalidOption
from ..models import LimitOverride
from ..store import limits
from ..store.audit import run_audited
from .access import log_action, staff_required
from .actions import console_actor
from .views import context, using

__all__ = ["limit_clear", "limit_set", "limits_page"]

#: Seconds between the page's own refreshes: in-flight counts move.
REFRESH_S = 2


@staff_required()
def limits_page(request: HttpRequest) -> HttpResponse:
    """List every declared or run-time limit with its use; refreshes itself."""
    return render(
        request,
        "django_jobqueue/console/limits.html",
        context(request, "Limits", rows=limits.limit_rows(using()), refresh_s=REFRESH_S),
    )


def _form_limit(request: HttpRequest) -> dict[str, Any]:
    """The limit dict of the set form's filled fields (numbers as integers)."""
    given: dict[str, Any] = {}
    for name in ("concurrency", "burst"):
        text = request.POST.get(name, "").strip()
        if text:
            try:
                given[name] = int(text)
            except ValueError:
                raise InvalidOption(
                    f"A limit's {name} must be an integer >= 1: got {text!r}."
                ) from None
    for name in ("rate", "partition"):
        text = request.POST.get(name, "").strip()
        if text:
            given[name] = text
    if request.POST.get("fair"):
        given["fair"] = True
    return given


def _back() -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("django_jobqueue_console:limits"))


@require_POST
@staff_required("limit")
def limit_set(request: HttpRequest) -> HttpResponse:
    """Set the form's target's limit at run time; a bad one is a message, nothing written."""
    alias = using()
    target = request.POST.get("target", "").strip()
    try:
        given = _form_limit(request)
        limit = run_audited(
            alias,
            lambda: limits.set_limit(alias, target, given, by=request.user.get_username()),
            console_actor(request),
            "limit_set",
            target=target,
            counts=lambda _limit: {"changed": 1},
        )
    except InvalidOption as exc:
        messages.error(request, str(exc))
        return _back()
    log_action(request, LimitOverride, f"console: set limit {target} {limit.as_dict()}")
    shown = ", ".join(f"{k} {v}" for k, v in limit.as_dict().items()) or "no limit"
    messages.success(request, f"Limit of {target} set: {shown}.")
    return _back()


@require_POST
@staff_required("limit")
def limit_clear(request: HttpRequest) -> HttpResponse:
    """Clear the form's target's run-time limit (the declared one applies again)."""
    alias = using()
    target = request.POST.get("target", "").strip()
    try:
        cleared = run_audited(
            alias,
            lambda: limits.clear_limit(alias, target),
            console_actor(request),
            "limit_clear",
            target=target,
            counts=lambda cleared: {"changed": int(cleared)},
        )
    except InvalidOption as exc:
        messages.error(request, str(exc))
        return _back()
    log_action(request, LimitOverride, f"console: clear limit {target} (changed: {cleared})")
    (messages.success if cleared else messages.info)(
        request,
        f"Run-time limit of {target} cleared." if cleared else f"{target} had no run-time limit.",
    )
    return _back()
