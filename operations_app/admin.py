"""Django admin for operations. Alert rules use the console's form (secrets masked, the same
checks); deliveries, attempts, incidents, heartbeats, counters and task statistics are records
the system writes, so they are read-only here: nothing can be added, changed or deleted behind
the services that keep them (an incident deleted by hand would be notified again, a counter
deleted would run backwards on /metrics). Times show as UTC dates (``admin_dates``).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from opensquilla_site.admin_dates import ShowOnlyAdmin, with_dates
from opensquilla_site.timeutil import ms_text

from .alerts.forms import AlertRuleForm
from .alerts.service import send_test, store_rule
from .alerts.validation import masked_target
from .models import (
    AlertDelivery,
    AlertDeliveryAttempt,
    AlertIncident,
    AlertRule,
    Heartbeat,
    OpsCounter,
    TaskStat,
)


class ReadOnlyAdmin(ShowOnlyAdmin):
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AlertRule)
class AlertRuleAdmin(admin.ModelAdmin):
    form = AlertRuleForm
    list_display = (
        "name",
        "condition",
        "gateway",
        "agent",
        "scope",
        "threshold",
        "channel",
        "shown_target",
        "enabled",
    )
    list_filter = ("condition", "gateway", "channel", "enabled")
    search_fields = ("name",)
    actions = ("send_test_notice",)

    @admin.display(description="target")
    def shown_target(self, obj: AlertRule) -> str:
        return masked_target(obj)

    def save_model(self, request: HttpRequest, obj: AlertRule, form: Any, change: bool) -> None:
        store_rule(obj, actor=request.user.get_username())

    @admin.action(description="Send a test notice")
    def send_test_notice(self, request: HttpRequest, queryset: QuerySet[AlertRule]) -> None:
        for rule in queryset:
            send_test(rule, actor=request.user.get_username())
        self.message_user(request, f"{queryset.count()} test notice(s) queued.", messages.SUCCESS)


class AttemptInline(admin.TabularInline):
    model = AlertDeliveryAttempt
    extra = 0
    can_delete = False
    fields = ("number", "attempted", "ok", "status_code", "error", "duration_ms")
    readonly_fields = fields

    @admin.display(description="attempted at")
    def attempted(self, obj: AlertDeliveryAttempt) -> str:
        return ms_text(obj.attempted_at)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(AlertDelivery)
class AlertDeliveryAdmin(ReadOnlyAdmin):
    list_display = with_dates(
        AlertDelivery, ("id", "rule", "kind", "state", "attempts", "created_at", "sent_at")
    )
    list_filter = ("state", "kind")
    list_select_related = ("rule",)
    inlines = (AttemptInline,)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # The change view is the read-only detail page with its attempts.
        return False


@admin.register(AlertIncident)
class AlertIncidentAdmin(ReadOnlyAdmin):
    list_display = with_dates(
        AlertIncident, ("rule", "gateway_id", "subject", "opened_at", "resolved_at", "notified")
    )
    list_filter = ("notified", "gateway_id")
    list_select_related = ("rule",)


@admin.register(Heartbeat)
class HeartbeatAdmin(ReadOnlyAdmin):
    list_display = with_dates(Heartbeat, ("kind", "name", "state", "seen_at", "started_at"))


@admin.register(OpsCounter)
class OpsCounterAdmin(ReadOnlyAdmin):
    list_display = ("name", "label", "value")


@admin.register(TaskStat)
class TaskStatAdmin(ReadOnlyAdmin):
    list_display = with_dates(
        TaskStat, ("task", "runs", "failures", "duration_sum_ms", "last_run_at")
    )
