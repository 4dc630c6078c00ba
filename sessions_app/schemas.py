"""In/Out schemas of the sessions API."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from ninja import ModelSchema, Schema
from pydantic import AfterValidator

from opensquilla_site.schemas import (
    Int32,
    JsonValue,
    SessionKeyText,
    ShortText,
    Text,
    clean_json,
)

from .models import Session, TranscriptEntry


class SessionIn(Schema):
    session_key: SessionKeyText
    agent_id: ShortText | None = None

    model_config = {"extra": "forbid"}


def _gateway(obj: Any) -> str:
    # The column, not the relation: no query per row.
    if isinstance(obj, dict):
        return str(obj.get("gateway") or obj.get("gateway_id") or "local")
    return str(getattr(obj, "gateway_id", None) or obj.gateway)


class SessionOut(ModelSchema):
    gateway: str  # the gateway the session belongs to (sessions_app.gateways)

    class Meta:
        model = Session
        fields = [
            "session_key",
            "session_id",
            "epoch",
            "agent_id",
            "status",
            "created_at",
            "updated_at",
        ]

    @staticmethod
    def resolve_gateway(obj: Any) -> str:
        return _gateway(obj)


class SessionSummaryOut(ModelSchema):
    """A list row: the columns ``Session.objects.for_console()`` loads, so no N+1."""

    gateway: str

    class Meta:
        model = Session
        fields = [
            "session_key",
            "session_id",
            "epoch",
            "agent_id",
            "status",
            "updated_at",
        ]

    @staticmethod
    def resolve_gateway(obj: Any) -> str:
        return _gateway(obj)


class SessionPageOut(Schema):
    items: list[SessionSummaryOut]
    next_cursor: str | None


class MessageIn(Schema):
    role: Literal["user", "assistant", "system", "tool"]
    content: JsonValue = None
    # Checked whole (keys too: PostgreSQL's jsonb cannot hold a NUL in a key either).
    tool_calls: Annotated[list[dict[str, Any]], AfterValidator(clean_json)] | None = None
    tool_call_id: Text | None = None
    reasoning_content: Text | None = None
    token_count: Int32 | None = None

    model_config = {"extra": "forbid"}


class TranscriptEntryOut(ModelSchema):
    tool_calls: list[dict[str, Any]] | None = None

    @staticmethod
    def resolve_id(obj: TranscriptEntry) -> int:
        # The id the entry's gateway knows it by (a mirrored gateway's own id), as upstream
        # shows it and as checkpoints name it (``through-<id>``).
        return obj.own_id

    class Meta:
        model = TranscriptEntry
        fields = [
            "id",
            "session_id",
            "session_key",
            "message_id",
            "role",
            "content",
            "tool_call_id",
            "reasoning_content",
            "token_count",
            "created_at",
        ]


class TranscriptPageOut(Schema):
    items: list[TranscriptEntryOut]
    next_cursor: str | None
