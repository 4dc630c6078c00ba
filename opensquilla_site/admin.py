"""Admin for API tokens and the idempotent-request store.

A token's secret is shown once by ``create_api_token`` and only its digest is stored; the
admin shows the prefix and scope and can rename or revoke (through ``revoke_api_token``), but
never edits the digest, and a token keeps its user and scope (a token never outranks its user).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from .models import ApiToken, IdempotentRequest
from .tokens import revoke_api_token


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ("name", "user", "scope", "prefix", "created_at", "last_used_at", "revoked_at")
    list_filter = ("scope",)
    search_fields = ("name", "=prefix", "user__username")
    list_select_related = ("user",)
    exclude = ("digest",)
    readonly_fields = ("user", "scope", "prefix", "created_at", "last_used_at", "revoked_at")
    actions = ("revoke",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A token made here would have no secret to hand out: use create_api_token.
        return False

    @admin.action(description="Revoke selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        ids = list(queryset.filter(revoked_at__isnull=True).values_list("pk", flat=True))
        for token_id in ids:
            revoke_api_token(token_id=token_id)
        self.message_user(request, f"Revoked {len(ids)} token(s).", messages.SUCCESS)


@admin.register(IdempotentRequest)
class IdempotentRequestAdmin(admin.ModelAdmin):
    list_display = ("key", "method", "path", "status_code", "created_at")
    list_filter = ("method", "status_code")
    search_fields = ("=key",)
    list_select_related = False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [f.name for f in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
