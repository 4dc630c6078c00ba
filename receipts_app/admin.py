"""Django admin for the ledger. Actions call the same requeue services as every surface.

Nothing here edits behind the audit log: receipts, events and plans are read-only in the admin
(no add, change or delete); a receipt changes only through the actions below, which call the
requeue services and so record who did what. Times show as UTC dates (``admin_dates``).

Receipts are looked up by filter and search over indexed columns; the full result count
is skipped (``show_full_result_count``) because the table can hold millions of rows.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from opensquilla_site.admin_dates import ShowOnlyAdmin, with_dates
from sessions_app.gateways import Gateway

from .audit import Actor
from .models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from .requeue import acknowledge_receipt, requeue_receipt

OPERATE_PERM = "receipts_app.operate_receipts"
# A bulk action beyond this size belongs in a requeue plan (dry run, batches, progress).
ADMIN_ACTION_LIMIT = 500


def _actor(request: HttpRequest) -> Actor:
    return Actor(name=request.user.get_username(), surface="admin")


def _summarise(outcomes: Counter[str]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in outcomes.most_common())


@admin.register(MemoryDurableReceipt)
class MemoryDurableReceiptAdmin(ShowOnlyAdmin):
    list_display = with_dates(
        MemoryDurableReceipt,
        (
            "receipt_id",
            "gateway_id",
            "status",
            "scope",
            "agent_id",
            "session_key",
            "attempt_count",
            "created_at",
            "updated_at",
        ),
    )
    list_filter = ("status", "scope", "agent_id", "gateway")
    search_fields = ("=receipt_id", "^session_key", "=idempotency_key", "=session_id")
    list_select_related = False  # no relations: one query per page
    show_full_result_count = False
    list_per_page = 50
    ordering = ("-created_at", "-id")
    actions = ("requeue_selected", "acknowledge_selected")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # receipts are written by checkpoints, flushes, repairs and imports

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a status changes through requeue/acknowledge, which leave an event

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a deleted receipt would leave memory at risk with no trace

    def has_operate_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(OPERATE_PERM)

    @admin.action(description="Requeue selected receipts", permissions=["operate"])
    def requeue_selected(self, request: HttpRequest, queryset: QuerySet) -> None:
        ids = list(queryset.values_list("receipt_id", flat=True)[: ADMIN_ACTION_LIMIT + 1])
        if len(ids) > ADMIN_ACTION_LIMIT:
            self.message_user(
                request,
                f"More than {ADMIN_ACTION_LIMIT} receipts selected: use a requeue plan in the console.",
                messages.ERROR,
            )
            return
        outcomes: Counter[str] = Counter()
        warnings: set[str] = set()  # gateways whose queue has no live worker
        for receipt_id in ids:
            result = requeue_receipt(receipt_id=receipt_id, actor=_actor(request))
            outcomes[str(result.outcome)] += 1
            if result.warning:
                warnings.add(result.warning)
        self.message_user(request, f"Requeue: {_summarise(outcomes)}.", messages.SUCCESS)
        for warning in sorted(warnings):
            self.message_user(request, f"{warning}.", messages.WARNING)

    @admin.action(description="Acknowledge selected receipts…", permissions=["operate"])
    def acknowledge_selected(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """Two steps, like Django's delete action: a page asks for the reason, then applies."""
        rows = list(queryset.values_list("pk", "receipt_id")[: ADMIN_ACTION_LIMIT + 1])
        ids = [receipt_id for _pk, receipt_id in rows]
        if len(ids) > ADMIN_ACTION_LIMIT:
            self.message_user(
                request,
                f"Select at most {ADMIN_ACTION_LIMIT} receipts to acknowledge.",
                messages.ERROR,
            )
            return None
        reason = (request.POST.get("reason") or "").strip()
        if request.POST.get("apply") and reason:
            outcomes: Counter[str] = Counter()
            for receipt_id in ids:
                result = acknowledge_receipt(
                    receipt_id=receipt_id, actor=_actor(request), reason=reason
                )
                outcomes[str(result.outcome)] += 1
            self.message_user(request, f"Acknowledge: {_summarise(outcomes)}.", messages.SUCCESS)
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Acknowledge receipts",
            "opts": self.model._meta,
            "receipts": queryset.only("receipt_id", "status", "scope", "session_key")[
                :ADMIN_ACTION_LIMIT
            ],
            "ids": ids,
            "pks": [pk for pk, _rid in rows],
            "reason_missing": bool(request.POST.get("apply")) and not reason,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/receipts_app/acknowledge.html", context)


@admin.register(ReceiptEvent)
class ReceiptEventAdmin(ShowOnlyAdmin):
    """The audit trail is append-only: nobody edits or deletes it, not even here."""

    list_display = with_dates(
        ReceiptEvent,
        (
            "created_at",
            "gateway_id",
            "actor",
            "surface",
            "action",
            "outcome",
            "receipt_id",
            "from_status",
            "to_status",
        ),
    )
    list_filter = ("gateway_id", "surface", "action", "outcome")
    search_fields = ("=receipt_id", "=actor", "=plan_id", "^session_key")
    list_select_related = False
    show_full_result_count = False
    ordering = ("-created_at", "-id")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class PlanGatewayFilter(admin.SimpleListFilter):
    """A plan's gateway is frozen in its filter (``filters["gateway"]``; absent: every one)."""

    title = "gateway"
    parameter_name = "gateway"
    EVERY = "-"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        names = Gateway.objects.order_by("name").values_list("name", flat=True)
        return [*((n, n) for n in names), (self.EVERY, "every gateway")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if not value:
            return queryset
        if value == self.EVERY:
            return queryset.filter(filters__gateway__isnull=True)
        return queryset.filter(filters__gateway=value)


@admin.register(RequeuePlan)
class RequeuePlanAdmin(ShowOnlyAdmin):
    """Plans are created and executed by the requeue service; the admin only shows them."""

    list_display = with_dates(
        RequeuePlan,
        (
            "plan_id",
            "plan_gateway",
            "state",
            "created_by",
            "surface",
            "total",
            "processed",
            "created_at",
        ),
    )
    list_filter = ("state", PlanGatewayFilter, "surface")
    search_fields = ("=plan_id", "=created_by")
    list_select_related = False
    ordering = ("-created_at",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # the audit log and a running plan's worker name it by id

    @admin.display(description="gateway")
    def plan_gateway(self, obj: RequeuePlan) -> str:
        return str((obj.filters or {}).get("gateway") or "every gateway")
