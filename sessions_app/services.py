"""Session services: create, read, append, reset and delete (docs/UPSTREAM.md#sessions-and-transcripts).

Every key is canonicalised on the way in and addresses a session of the current gateway
(``sessions_app.gateways``: ``local`` unless an edge chose another). Writes run in one transaction each; reset and
delete lock the session row so a concurrent fenced receipt write sees either the old or the
new generation, never a mix.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction

from opensquilla_site.identifiers import check_identifier
from opensquilla_site.timeutil import now_ms

from .keys import agent_id_for_session_key, canonicalize_session_key, normalize_agent_id
from .models import CompactedTranscriptEntry, CompactionSummary, Session, TranscriptEntry

SessionPurger = Callable[[str], int]
_session_purgers: list[SessionPurger] = []


def register_session_purger(purger: SessionPurger) -> None:
    """Register a callable that deletes rows owned by a session key (receipts, for example).

    Called inside the delete transaction. Registration is idempotent.
    """
    if purger not in _session_purgers:
        _session_purgers.append(purger)


def _require_key(session_key: str) -> str:
    key = canonicalize_session_key(session_key)
    if not key:
        raise ValueError("session_key must be a non-empty string")
    if "\x00" in key:
        raise ValueError("session_key must not contain NUL characters")
    return key


def create_session(session_key: str, *, agent_id: str | None = None) -> Session:
    # Only a new key is checked for control characters: a session already stored with one
    # (before this rule, or by hand) stays addressable, to be read, reset or deleted.
    key = check_identifier(_require_key(session_key), "session_key")
    agent = normalize_agent_id(agent_id or agent_id_for_session_key(key) or "main")
    with transaction.atomic():
        if Session.objects.here().filter(session_key=key).exists():
            raise ValueError(f"Session already exists: {key}")
        return Session.objects.create(session_key=key, agent_id=agent)


def get_session(session_key: str) -> Session | None:
    key = canonicalize_session_key(session_key)
    if not key:
        return None
    return Session.objects.here().filter(session_key=key).first()


def reset_session(session_key: str) -> Session:
    """Start a new generation: new ``session_id``, ``epoch + 1``, old transcript dropped.

    Receipts are left in place with the old ``session_id`` (docs/UPSTREAM.md#cascades), so they stop
    counting as evidence for the new generation.
    """
    key = _require_key(session_key)
    with transaction.atomic():
        session = Session.objects.here().select_for_update().filter(session_key=key).first()
        if session is None:
            raise KeyError(f"Session not found: {key}")
        old_session_id = session.session_id
        TranscriptEntry.objects.here().filter(session_id=old_session_id).delete()
        session.session_id = str(uuid.uuid4())
        session.epoch = session.epoch + 1
        session.updated_at = now_ms()
        session.save(update_fields=["session_id", "epoch", "updated_at"])
        return session


def delete_session(session_key: str) -> bool:
    """Delete the session, its transcript, its compactions and every receipt of the key."""
    key = canonicalize_session_key(session_key)
    if not key:
        return False
    with transaction.atomic():
        session = Session.objects.here().select_for_update().filter(session_key=key).first()
        if session is None:
            return False
        TranscriptEntry.objects.here().filter(session_key=key).delete()
        # Compactions go too, as upstream: a deleted session's memory is not repaired later.
        CompactedTranscriptEntry.objects.here().filter(session_key=key).delete()
        CompactionSummary.objects.here().filter(session_key=key).delete()
        for purge in _session_purgers:
            purge(key)
        session.delete()
        return True


def append_message(
    session_key: str,
    *,
    role: str,
    content: Any,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
    reasoning_content: str | None = None,
    token_count: int | None = None,
) -> TranscriptEntry:
    key = _require_key(session_key)
    if role not in TranscriptEntry.ROLES:
        raise ValueError(f"role must be one of {', '.join(TranscriptEntry.ROLES)}; got {role!r}")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise ValueError("tool_calls must be a list of objects")
    with transaction.atomic():
        session = Session.objects.here().select_for_update().filter(session_key=key).first()
        if session is None:
            raise KeyError(f"Session not found: {key}")
        now = now_ms()
        if content is not None and not isinstance(content, str):
            # Stored as upstream's J(content), which is also what a checkpoint would emit.
            content = json.dumps(content, ensure_ascii=False, sort_keys=True, default=str)
        entry = TranscriptEntry.objects.create(
            gateway_id=session.gateway_id,
            session_id=session.session_id,
            session_key=key,
            role=role,
            content=content,
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            # Upstream keeps reasoning only on assistant messages.
            reasoning_content=reasoning_content if role == "assistant" else None,
            token_count=token_count,
            created_at=now,
        )
        Session.objects.filter(pk=session.pk).update(updated_at=now)
        return entry


def get_transcript(session_id: str) -> list[TranscriptEntry]:
    return list(
        TranscriptEntry.objects.here().filter(session_id=session_id).order_by("created_at", "id")
    )


acreate_session = sync_to_async(create_session)
aget_session = sync_to_async(get_session)
areset_session = sync_to_async(reset_session)
adelete_session = sync_to_async(delete_session)
aappend_message = sync_to_async(append_message)
aget_transcript = sync_to_async(get_transcript)
