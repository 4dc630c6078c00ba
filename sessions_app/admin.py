"""Admin for sessions and transcripts: a window onto them, never a way around the services.

Every field is read-only (a key, a generation or a status typed here would change the ledger
with no event). Sessions are not added here: agents, the API and imports create them, and a
hand-made one would hold no transcript to protect. Deleting is offered, one at a time or as
the bulk action, because an operator needs it (a stray or broken key): it runs
``services.delete_session``, as the API's DELETE does, so the transcript, compactions and every
receipt of the key go with it and the audit trail records the delete with the admin user.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from opensquilla_site.acting import Actor, acting_as
from opensquilla_site.admin_dates import ShowOnlyAdmin, with_dates

from . import services
from .gateways import using_gateway
from .models import CompactedTranscriptEntry, CompactionSummary, Gateway, Session, TranscriptEntry


def _admin_actor(request: HttpRequest) -> Actor:
    return Actor(name=request.user.get_username(), surface="admin")


@admin.register(Gateway)
class GatewayAdmin(admin.ModelAdmin):
    """Gateways are created by imports and followers; the display name and the link to the
    gateway's RPC (its address and the *name* of the environment variable holding its token,
    never the token) are edited here (docs/MIRROR.md#gateway-link)."""

    list_display = with_dates(
        Gateway,
        (
            "name",
            "display_name",
            "opensquilla_version",
            "schema_version",
            "rpc_address",
            "last_seen_at",
        ),
    )
    search_fields = ("=name", "display_name")
    # Shown read-only as dates (with_dates below), so they are not form fields.
    exclude = ("created_at", "last_seen_at", "ledger_retired_at", "repairs")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Everything but the display name and the link; times as dates (django-stubs types this
        # list as field names only, Django takes the date columns' callables too).
        return with_dates(
            Gateway,
            (
                "name",
                "source",
                "opensquilla_version",
                "schema_version",
                "last_seen_at",
                "created_at",
                "ledger_retired_at",
            ),
        ) + ("link_token", "repairs_shown")

    @admin.display(description="repairs")
    def repairs_shown(self, obj: Gateway) -> str:
        # Changed only on the console's gateway repairs page, by an admin, audited
        # (receipts_app.handover, which this app may not import).
        if obj is None or not obj.name:
            return "-"
        return f"{obj.repairs_label} (changed on the console's gateway repairs page, audited)"

    @admin.display(description="token")
    def link_token(self, obj: Gateway) -> str:
        # Says where the token is read from and whether this process has it; never its value,
        # and never whether a variable the link may not read exists (link_policy).
        if obj is None or not obj.name:
            return "-"
        refusal = obj.token_env_refusal
        if refusal:
            return f"refused: {refusal}"
        found = "set" if obj.link_token() else "not set"
        return f"read from ${obj.token_env_name} ({found} in this web process)"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # its rows point at it (PROTECT)


def _delete_session(request: HttpRequest, gateway_id: str, session_key: str) -> None:
    # A session key is unique only within its gateway: the service deletes the current
    # gateway's session, so the admin acts in the gateway of the row it was asked to delete.
    with acting_as(_admin_actor(request)), using_gateway(gateway_id):
        services.delete_session(session_key)


@admin.register(Session)
class SessionAdmin(ShowOnlyAdmin):
    list_display = with_dates(
        Session,
        ("session_key", "gateway_id", "agent_id", "epoch", "session_id", "status", "updated_at"),
    )
    list_filter = ("gateway", "agent_id", "status")
    search_fields = ("^session_key", "=session_id")
    list_select_related = False
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def delete_model(self, request: HttpRequest, obj: Session) -> None:
        _delete_session(request, str(obj.gateway_id), obj.session_key)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Session]) -> None:
        # One service call per session, as Django's docs ask of a bulk delete with side effects.
        rows = list(queryset.values_list("gateway_id", "session_key"))
        for gateway_id, key in rows:
            _delete_session(request, gateway_id, key)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> Any:
        """Django's confirmation lists what the collector finds; the service deletes more
        (rows tied to the key within its gateway, not by a foreign key), so the page says so."""
        deleted, model_count, perms_needed, protected = super().get_deleted_objects(objs, request)
        for model in (TranscriptEntry, CompactionSummary, CompactedTranscriptEntry):
            n = sum(
                model.objects.filter(gateway_id=obj.gateway_id, session_key=obj.session_key).count()
                for obj in objs
            )
            if n:
                model_count[str(model._meta.verbose_name_plural)] = n
        deleted.append(
            "Every receipt of the session key (all generations); the audit trail keeps a "
            "“purged” event for each and a “session_deleted” event naming you."
        )
        return deleted, model_count, perms_needed, protected


@admin.register(TranscriptEntry)
class TranscriptEntryAdmin(ShowOnlyAdmin):
    list_display = with_dates(
        TranscriptEntry,
        (
            "id",
            "gateway_id",
            "gateway_entry_id",
            "session_key",
            "role",
            "created_at",
            "token_count",
        ),
    )
    list_filter = ("gateway", "role")
    search_fields = ("=session_id", "^session_key", "=message_id")
    list_select_related = False
    show_full_result_count = False
    ordering = ("-id",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a checkpoint's coverage hash covers them; a session delete removes them
