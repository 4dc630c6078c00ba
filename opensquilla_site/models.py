"""Site-wide models: API tokens and the idempotent-request store of the JSON API."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from opensquilla_site.timeutil import now_ms


class ApiToken(models.Model):
    """A Bearer token for automation. Only a SHA-256 digest of the secret is stored."""

    SCOPES = ("read", "operate", "admin")

    name = models.CharField(max_length=100)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    scope = models.CharField(max_length=16, default="read")
    prefix = models.CharField(max_length=12, db_index=True)
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.BigIntegerField(default=now_ms)
    last_used_at = models.BigIntegerField(null=True, blank=True)
    revoked_at = models.BigIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope__in=["read", "operate", "admin"]),
                name="api_token_scope_valid",
            )
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.scope}, {self.prefix}…)"


class IdempotentRequest(models.Model):
    """The first response to an API call made with an ``Idempotency-Key`` header."""

    key = models.CharField(max_length=255)
    token_digest = models.CharField(max_length=64, default="", blank=True)
    method = models.CharField(max_length=8)
    path = models.TextField()
    # sha256 of the query string and the body (JSON canonicalised): a retry must send the same
    # request; "" on rows stored before the digest existed (not compared).
    request_digest = models.CharField(max_length=64, default="", blank=True)
    status_code = models.IntegerField()
    response_body = models.JSONField()
    created_at = models.BigIntegerField(default=now_ms)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["token_digest", "key"], name="idempotent_request_key_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.method} {self.path} [{self.key}]"
