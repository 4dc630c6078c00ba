"""Admin for sessions and transcripts. Keys and generations change only through services."""

from __future__ import annotations

from django.contrib import admin

from .models import Session, TranscriptEntry


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    list_display = ("session_key", "agent_id", "epoch", "session_id", "status", "updated_at")
    list_filter = ("agent_id", "status")
    search_fields = ("^session_key", "=session_id")
    list_select_related = False
    show_full_result_count = False
    # A reset or delete must go through sessions_app.services (new generation, cascades).
    readonly_fields = ("session_key", "session_id", "epoch", "agent_id", "created_at", "updated_at")


@admin.register(TranscriptEntry)
class TranscriptEntryAdmin(admin.ModelAdmin):
    list_display = ("id", "session_key", "role", "created_at", "token_count")
    list_filter = ("role",)
    search_fields = ("=session_id", "^session_key", "=message_id")
    list_select_related = False
    show_full_result_count = False
    ordering = ("-id",)
    readonly_fields = ("session_id", "session_key", "message_id", "created_at")
