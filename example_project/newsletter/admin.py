"""Admin of subscribers and issues (the jobs themselves are under "Job queue")."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from . import tasks
from .models import Delivery, Issue, Subscriber


@admin.register(Subscriber)
class SubscriberAdmin(admin.ModelAdmin):
    list_display = ["email", "name", "subscribed_at", "welcomed_at", "welcome_jid"]
    search_fields = ["email", "name", "welcome_jid"]
    readonly_fields = ["subscribed_at", "welcomed_at", "welcome_jid"]


@admin.register(Issue)
class IssueAdmin(admin.ModelAdmin):
    list_display = ["title", "published", "published_at", "announce_jid", "created_at"]
    list_filter = ["published"]
    readonly_fields = ["published_at", "announce_jid", "created_at"]
    actions = ["publish", "send_test_copy"]

    @admin.action(description="Publish the selected issues (mails every subscriber)")
    def publish(self, request: HttpRequest, queryset: QuerySet[Issue]) -> None:
        count = 0
        for issue in queryset.filter(published=False):
            issue.publish()
            count += 1
        self.message_user(request, f"Published {count} issue(s).", messages.SUCCESS)

    @admin.action(description="Send me a test copy (a Django @task)")
    def send_test_copy(self, request: HttpRequest, queryset: QuerySet[Issue]) -> None:
        email = getattr(request.user, "email", "") or "editors@example.com"
        for issue in queryset:
            tasks.send_test_copy.enqueue(issue.pk, email)
        self.message_user(request, f"Test copies enqueued for {email}.", messages.SUCCESS)


@admin.register(Delivery)
class DeliveryAdmin(admin.ModelAdmin):
    list_display = ["issue", "subscriber", "sent_at"]
    list_filter = ["issue"]
    list_select_related = ["issue", "subscriber"]
