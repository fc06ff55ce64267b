"""The Django admin of the SDK gateway's API tokens.

Adding a token makes its secret (:func:`django_jobqueue.store.apitokens.issue_token`) and
shows it once, in the success message; only its hash is stored. Tokens are revoked,
not edited: queues and scopes are chosen when one is made. Making, revoking and
deleting are written to the audit log (docs/console.md "Audit log").
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext_lazy as _

from ..core.exceptions import InvalidOption
from ..models import API_SCOPES, ApiToken
from ..overview import jobs_database
from ..store import apitokens
from ..store.audit import Actor, run_audited
from .display import time_display

__all__ = ["ApiTokenAdmin"]


class ApiTokenForm(forms.ModelForm):
    """Name, allowed queues (comma-separated), scopes and expiry of a new token."""

    queues_text = forms.CharField(
        label=_("allowed queues"),
        initial="*",
        help_text=_("Comma-separated queue names or 'prefix*' patterns; '*': every queue."),
    )
    scope_choices = forms.MultipleChoiceField(
        label=_("scopes"),
        choices=[(scope, scope) for scope in API_SCOPES],
        widget=forms.CheckboxSelectMultiple,
    )

    class Meta:
        model = ApiToken
        fields = ("name", "expires_at")

    def clean(self) -> dict[str, Any]:
        """Check the queues and scopes as :func:`apitokens.issue_token` will."""
        data = super().clean() or {}
        try:
            queues = [q.strip() for q in data.get("queues_text", "").split(",") if q.strip()]
            data["queues"] = apitokens.check_queue_patterns(queues)
            data["scopes"] = apitokens.check_scopes(data.get("scope_choices") or [])
        except InvalidOption as exc:
            raise forms.ValidationError(str(exc)) from exc
        return data


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """API tokens: made here (the secret shown once), listed, revoked."""

    form = ApiTokenForm
    list_display = (
        "name",
        "prefix",
        "queues",
        "scopes",
        "expires_at_list",
        "revoked_at_list",
        "last_used_at_list",
    )
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix")
    ordering = ("-created_at",)
    actions = ("revoke",)
    readonly_fields = (
        "prefix",
        "queues",
        "scopes",
        "expires_at_display",
        "revoked_at_display",
        "last_used_at_display",
        "created_at_display",
    )

    expires_at_list = time_display("expires_at", stacked=True, model=ApiToken)
    revoked_at_list = time_display("revoked_at", stacked=True, model=ApiToken)
    last_used_at_list = time_display("last_used_at", stacked=True, model=ApiToken)
    expires_at_display = time_display("expires_at", model=ApiToken)
    revoked_at_display = time_display("revoked_at", model=ApiToken)
    last_used_at_display = time_display("last_used_at", model=ApiToken)
    created_at_display = time_display("created_at", model=ApiToken)

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> Any:
        """A new token: its form; an existing one: read-only fields."""
        if obj is None:
            return ("name", "queues_text", "scope_choices", "expires_at")
        return (
            "name",
            "prefix",
            "queues",
            "scopes",
            "expires_at_display",
            "revoked_at_display",
            "last_used_at_display",
            "created_at_display",
        )

    def has_change_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        """Tokens are not edited: make a new one and revoke the old."""
        return False

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        """Make the token (audited) and show its text once."""
        name = form.cleaned_data["name"]
        row, text = run_audited(
            jobs_database(),
            lambda: apitokens.issue_token(
                name,
                queues=form.cleaned_data["queues"],
                scopes=form.cleaned_data["scopes"],
                expires_at=form.cleaned_data.get("expires_at"),
            ),
            Actor("admin", request.user.get_username()),
            "token_create",
            target=f"token {name}",
            counts=lambda made: {"created": 1},
        )
        obj.pk = row.pk
        obj.__dict__.update({k: v for k, v in row.__dict__.items() if k != "_state"})
        obj._state.adding = False
        obj._state.db = row._state.db
        self.message_user(
            request,
            _("Token %(prefix)s... made; copy it now, it is not shown again: %(text)s")
            % {"prefix": row.prefix, "text": text},
            messages.WARNING,
        )

    def delete_model(self, request: HttpRequest, obj: ApiToken) -> None:
        """Delete one token from its page's "Delete" link, audited."""
        self.delete_queryset(request, ApiToken.objects.using(obj._state.db).filter(pk=obj.pk))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        """Delete the tokens (Django's "Delete selected"), audited as ``token_delete``:
        a deleted token authenticates no more, as a revoked one."""
        names = sorted(queryset.values_list("name", flat=True)[:20])
        run_audited(
            jobs_database(),
            lambda: queryset.delete()[1].get(ApiToken._meta.label, 0),
            Actor("admin", request.user.get_username()),
            "token_delete",
            target="tokens " + ", ".join(names),
            counts=lambda count: {"deleted": count},
        )

    @admin.action(description=_("Revoke the selected tokens"), permissions=["delete"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        """Revoke the selected live tokens (audited)."""
        names = sorted(queryset.values_list("name", flat=True)[:20])
        count = run_audited(
            jobs_database(),
            lambda: queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now()),
            Actor("admin", request.user.get_username()),
            "token_revoke",
            target="tokens " + ", ".join(names),
            counts=lambda count: {"revoked": count},
        )
        self.message_user(request, _("Revoked %(count)d token(s).") % {"count": count})
