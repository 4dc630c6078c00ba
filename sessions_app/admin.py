"""Admin for sessions and transcripts. Keys and generations change only through services;
transcript entries are read-only (a checkpoint's coverage hash covers them)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from .models import Gateway, Session, TranscriptEntry


@admin.register(Gateway)
class GatewayAdmin(admin.ModelAdmin):
    """Gateways are created by imports and followers; only the display name is edited here."""

    list_display = ("name", "display_name", "opensquilla_version", "schema_version", "last_seen_at")
    search_fields = ("=name", "display_name")
    readonly_fields = (
        "name",
        "source",
        "opensquilla_version",
        "schema_version",
        "last_seen_at",
        "created_at",
    )

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # its rows point at it (PROTECT)


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = (
        "session_key",
        "gateway_id",
        "agent_id",
        "epoch",
        "session_id",
        "status",
        "updated_at",
    )
    list_filter = ("gateway", "agent_id", "status")
    search_fields = ("^session_key", "=session_id")
    list_select_related = False
    show_full_result_count = False
    # A reset or delete must go through sessions_app.services (new generation, cascades).
    readonly_fields = (
        "gateway",
        "session_key",
        "session_id",
        "epoch",
        "agent_id",
        "created_at",
        "updated_at",
    )


@admin.register(TranscriptEntry)
class TranscriptEntryAdmin(admin.ModelAdmin):
    list_display = ("id", "session_key", "role", "created_at", "token_count")
    list_filter = ("role",)
    search_fields = ("=session_id", "^session_key", "=message_id")
    list_select_related = False
    show_full_result_count = False
    ordering = ("-id",)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
