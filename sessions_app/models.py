"""Sessions and their transcripts (docs/UPSTREAM.md#sessions-and-transcripts)."""

from __future__ import annotations

import uuid

from django.db import models

from opensquilla_site.timeutil import now_ms

from .gateways import Gateway, GatewayManager, GatewayQuerySet, gateway_field

__all__ = [
    "CompactedTranscriptEntry",
    "CompactionSummary",
    "Gateway",
    "Session",
    "TranscriptEntry",
]


def new_session_id() -> str:
    return str(uuid.uuid4())


class SessionQuerySet(GatewayQuerySet["Session"]):
    def for_console(self) -> SessionQuerySet:
        return self.only(
            "id",
            "gateway_id",
            "session_key",
            "session_id",
            "epoch",
            "agent_id",
            "status",
            "updated_at",
        )


class TranscriptQuerySet(GatewayQuerySet["TranscriptEntry"]):
    pass


class CompactionQuerySet(GatewayQuerySet["CompactionSummary"]):
    pass


class CompactedEntryQuerySet(GatewayQuerySet["CompactedTranscriptEntry"]):
    pass


class Session(models.Model):
    """One conversation key of a gateway; ``session_id`` names its current generation."""

    gateway = gateway_field()
    session_key = models.TextField()
    session_id = models.CharField(max_length=64, default=new_session_id, db_index=True)
    # Raised by one on every reset, never lowered: the reset service only ever adds 1.
    epoch = models.PositiveBigIntegerField(default=0)
    agent_id = models.CharField(max_length=64, default="main")
    status = models.CharField(max_length=32, default="active")
    created_at = models.BigIntegerField(default=now_ms)
    updated_at = models.BigIntegerField(default=now_ms)

    objects = GatewayManager.from_queryset(SessionQuerySet)()

    class Meta:
        ordering = ["-updated_at", "-id"]
        indexes = [
            models.Index(fields=["agent_id", "updated_at"], name="session_agent_updated"),
            models.Index(fields=["updated_at", "id"], name="session_updated_id"),
        ]
        constraints = [
            models.CheckConstraint(condition=models.Q(epoch__gte=0), name="session_epoch_gte_0"),
            # A key is unique within its gateway: every gateway has its own agent:main:main.
            models.UniqueConstraint(
                fields=["gateway", "session_key"], name="session_gateway_key_uniq"
            ),
        ]

    def __str__(self) -> str:
        return self.session_key


class TranscriptEntry(models.Model):
    """One message of a session generation, identified by (gateway, its own id).

    ``id`` is ours (a surrogate, global, never reused). ``gateway_entry_id`` is the id the
    entry has in its gateway's ``sessions.db`` (an import or the mirror brought it); it is NULL
    for an entry written here, whose own id is ``id``. Everything upstream computes from entry
    ids (checkpoint turn ids, coverage hashes, event ids) reads :attr:`own_id`, so a gateway's
    checkpoints cover its transcripts here exactly as they do there (docs/ARCHITECTURE.md,
    "Gateways")."""

    ROLES = ("user", "assistant", "system", "tool")

    id = models.BigAutoField(primary_key=True)
    gateway = gateway_field()
    gateway_entry_id = models.BigIntegerField(null=True, blank=True)
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

    objects = GatewayManager.from_queryset(TranscriptQuerySet)()

    class Meta:
        verbose_name_plural = "transcript entries"
        ordering = ["created_at", "id"]
        indexes = [
            models.Index(
                fields=["session_id", "created_at", "id"], name="transcript_session_order"
            ),
            models.Index(fields=["session_key"], name="transcript_session_key"),
            # The OpenSquilla import and mirror match entries by (session_id, message_id);
            # without it each batch scanned the session's whole transcript (quadratic).
            models.Index(fields=["session_id", "message_id"], name="transcript_session_message"),
        ]

    def __str__(self) -> str:
        return f"{self.role}#{self.own_id}"

    @property
    def own_id(self) -> int:
        """The id the entry's gateway knows it by: the one rule every upstream value uses."""
        return self.gateway_entry_id if self.gateway_entry_id is not None else self.id


class CompactionSummary(models.Model):
    """A compaction of a session generation, as OpenSquilla's ``session_summaries`` row.

    This product never compacts; these rows arrive with a database imported or mirrored
    from OpenSquilla. ``flush_receipt_status`` says whether the memory flush before the
    compaction was safe; ``degraded_forensic`` and ``failed_retryable`` rows are repaired by
    re-flushing their pre-image (``CompactedTranscriptEntry``), docs/WORKERS.md.
    """

    gateway = gateway_field()
    session_id = models.CharField(max_length=64)
    session_key = models.TextField()
    compaction_index = models.IntegerField(default=0)
    compaction_id = models.TextField(null=True, blank=True)
    trigger_reason = models.TextField(null=True, blank=True)
    summary_text = models.TextField(default="", blank=True)
    removed_count = models.IntegerField(default=0)
    kept_count = models.IntegerField(default=0)
    flush_receipt_status = models.CharField(max_length=32, default="unknown")
    covered_through_id = models.BigIntegerField(default=0)
    created_at = models.BigIntegerField(default=now_ms)

    objects = GatewayManager.from_queryset(CompactionQuerySet)()

    class Meta:
        verbose_name_plural = "compaction summaries"
        ordering = ["created_at", "id"]
        indexes = [
            # The repair scan: degraded rows, oldest first.
            models.Index(
                fields=["flush_receipt_status", "created_at"], name="summary_flush_status"
            ),
            models.Index(fields=["session_key", "compaction_id"], name="summary_key_compaction"),
        ]

    def __str__(self) -> str:
        return f"{self.session_key}#{self.compaction_id or self.id}"


class CompactedTranscriptEntry(models.Model):
    """A transcript entry a compaction removed: the compaction's pre-image."""

    gateway = gateway_field()
    session_id = models.CharField(max_length=64)
    session_key = models.TextField()
    compaction_id = models.TextField()
    original_entry_id = models.BigIntegerField()
    message_id = models.CharField(max_length=64, default="", blank=True)
    role = models.CharField(max_length=16)
    content = models.TextField(null=True, blank=True)
    tool_calls = models.JSONField(null=True, blank=True)
    tool_call_id = models.TextField(null=True, blank=True)
    reasoning_content = models.TextField(null=True, blank=True)
    token_count = models.IntegerField(null=True, blank=True)
    created_at = models.BigIntegerField(default=now_ms)

    objects = GatewayManager.from_queryset(CompactedEntryQuerySet)()

    class Meta:
        verbose_name_plural = "compacted transcript entries"
        ordering = ["created_at", "original_entry_id", "id"]
        indexes = [
            models.Index(
                fields=["session_id", "compaction_id", "created_at"],
                name="compacted_entry_preimage",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.role}#{self.original_entry_id}@{self.compaction_id}"
