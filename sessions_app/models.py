"""Sessions and their transcripts (docs/UPSTREAM.md#sessions-and-transcripts)."""

from __future__ import annotations

import uuid

from django.db import models

from opensquilla_site.timeutil import now_ms


def new_session_id() -> str:
    return str(uuid.uuid4())


class SessionQuerySet(models.QuerySet["Session"]):
    def for_console(self) -> SessionQuerySet:
        return self.only(
            "id", "session_key", "session_id", "epoch", "agent_id", "status", "updated_at"
        )


class Session(models.Model):
    """One conversation key; ``session_id`` names its current generation."""

    session_key = models.TextField(unique=True)
    session_id = models.CharField(max_length=64, default=new_session_id, db_index=True)
    # Raised by one on every reset, never lowered: the reset service only ever adds 1.
    epoch = models.PositiveBigIntegerField(default=0)
    agent_id = models.CharField(max_length=64, default="main")
    status = models.CharField(max_length=32, default="active")
    created_at = models.BigIntegerField(default=now_ms)
    updated_at = models.BigIntegerField(default=now_ms)

    objects = SessionQuerySet.as_manager()

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [
            models.Index(fields=["agent_id", "updated_at"], name="session_agent_updated"),
            models.Index(fields=["updated_at", "id"], name="session_updated_id"),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(epoch__gte=0), name="session_epoch_gte_0"),
        ]

    def __str__(self) -> str:
        return self.session_key


class TranscriptEntry(models.Model):
    """One message of a session generation. ``id`` is global and never reused."""

    ROLES = ("user", "assistant", "system", "tool")

    id = models.BigAutoField(primary_key=True)
    session_id = models.CharField(max_length=64)
    session_key = models.TextField()
    message_id = models.CharField(max_length=64, default=new_session_id)
    role = models.CharField(max_length=16)
    content = models.TextField(null=True, blank=True)
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.TextField(null=True, blank=True)
    reasoning_content = models.TextField(null=True, blank=True)
    token_count = models.IntegerField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_ms)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["session_id", "created_at", "id"], name="transcript_session_order"
            ),
            models.Index(fields=["session_key"], name="transcript_session_key"),
        ]

    def __str__(self) -> str:
        return f"{self.role}#{self.id}"
