"""Sessions API: create, read, list, reset, delete, append, transcript.

Session keys contain colons and may contain slashes, so every route takes the key as a
``sessionkey`` path parameter (any characters, slashes included): ``/sessions/agent:main:webchat:abc/transcript``. A key that itself ends
in one of the sub-route names (``/reset``, ``/messages``, …) cannot be addressed this way.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema, Status
from pydantic import Field

from opensquilla_site.acting import Actor, acting_as
from opensquilla_site.auth import ADMIN, OPERATE, READ, principal
from opensquilla_site.exceptions import ConflictError
from opensquilla_site.idempotency import run_idempotent
from opensquilla_site.pagination import MAX_PAGE_SIZE
from opensquilla_site.schemas import AUTH_ERRORS, READ_ERRORS, WRITE_ERRORS, errors

from . import services
from .models import Session
from .schemas import (
    MessageIn,
    SessionIn,
    SessionOut,
    SessionPageOut,
    TranscriptEntryOut,
    TranscriptPageOut,
)
from .selectors import get_session_or_404, page_sessions, page_transcript

router = Router(tags=["sessions"])


class SessionListQuery(Schema):
    search: str | None = Field(None, max_length=2000, description="key prefix or substring")
    agent: str | None = Field(None, max_length=64)
    gateway: str | None = Field(
        None, max_length=64, description="one gateway's sessions (every gateway when absent)"
    )
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(50, ge=1, le=MAX_PAGE_SIZE)


class TranscriptQuery(Schema):
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(100, ge=1, le=MAX_PAGE_SIZE)


@router.post(
    "",
    response={201: SessionOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="create_session",
)
def create_session(request: HttpRequest, payload: SessionIn) -> Status[Any]:
    def act() -> Status[Any]:
        try:
            session = services.create_session(payload.session_key, agent_id=payload.agent_id)
        except ValueError:
            existing = services.get_session(payload.session_key)
            if existing is not None:
                raise ConflictError(f"Session already exists: {existing.session_key}") from None
            raise
        return Status(201, SessionOut.from_orm(session))

    return run_idempotent(request, owner=principal(request).idempotency_owner, action=act)


@router.get(
    "",
    response={200: SessionPageOut, **errors(*AUTH_ERRORS, 404, 422)},
    auth=READ,
    operation_id="list_sessions",
)
def list_sessions(request: HttpRequest, query: Query[SessionListQuery]) -> dict[str, Any]:
    page = page_sessions(
        search=query.search,
        agent=query.agent,
        gateway=query.gateway,
        cursor=query.cursor,
        limit=query.limit,
    )
    return {"items": page.rows, "next_cursor": page.next_cursor}


# Sub-routes first: ``{sessionkey:key}`` would otherwise swallow "…/reset" as part of the key.
@router.post(
    "/{sessionkey:key}/reset",
    response={200: SessionOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="reset_session",
)
def reset_session(request: HttpRequest, key: str) -> Status[Any]:
    def act() -> Status[Any]:
        return Status(200, SessionOut.from_orm(services.reset_session(key)))

    return run_idempotent(request, owner=principal(request).idempotency_owner, action=act)


@router.post(
    "/{sessionkey:key}/messages",
    response={201: TranscriptEntryOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="append_message",
)
def append_message(request: HttpRequest, key: str, payload: MessageIn) -> Status[Any]:
    def act() -> Status[Any]:
        entry = services.append_message(key, **payload.model_dump())
        return Status(201, TranscriptEntryOut.from_orm(entry))

    return run_idempotent(request, owner=principal(request).idempotency_owner, action=act)


@router.get(
    "/{sessionkey:key}/transcript",
    response={200: TranscriptPageOut, **errors(*READ_ERRORS)},
    auth=READ,
    operation_id="list_transcript",
)
def list_transcript(
    request: HttpRequest, key: str, query: Query[TranscriptQuery]
) -> dict[str, Any]:
    session = get_session_or_404(key)
    page = page_transcript(session.session_id, cursor=query.cursor, limit=query.limit)
    return {"items": page.rows, "next_cursor": page.next_cursor}


@router.get(
    "/{sessionkey:key}",
    response={200: SessionOut, **errors(*READ_ERRORS)},
    auth=READ,
    operation_id="get_session",
)
def get_session(request: HttpRequest, key: str) -> Session:
    return get_session_or_404(key)


@router.delete(
    "/{sessionkey:key}",
    response={204: None, **errors(*AUTH_ERRORS, 404, 422)},
    auth=ADMIN,
    operation_id="delete_session",
)
def delete_session(request: HttpRequest, key: str) -> Status[None]:
    # The purge of the key's receipts records its audit events with the caller's name.
    with acting_as(Actor(principal(request).actor_name, "api")):
        deleted = services.delete_session(key)
    if not deleted:
        raise KeyError(f"Session not found: {key}")
    return Status(204, None)
