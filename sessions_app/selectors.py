"""Session reads shared by the console and the API."""

from __future__ import annotations

from opensquilla_site.pagination import Page, keyset_page
from sessions_app.keys import canonicalize_session_key, normalize_agent_id

from .models import Session, SessionQuerySet, TranscriptEntry


def filter_sessions(
    *, search: str | None = None, agent: str | None = None, gateway: str | None = None
) -> SessionQuerySet:
    """``search`` matches a canonical key prefix (literal) or any substring of the key.
    Every gateway's sessions unless ``gateway`` (or an edge, ``sessions_app.gateways``) names one."""
    qs: SessionQuerySet = Session.objects.of_gateway(gateway)
    if agent:
        qs = qs.filter(agent_id=normalize_agent_id(agent))
    if search:
        term = search.strip()
        canonical = canonicalize_session_key(term)
        qs = qs.filter(session_key__contains=term) | qs.filter(session_key__startswith=canonical)
    return qs


def page_sessions(
    *,
    search: str | None = None,
    agent: str | None = None,
    gateway: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page:
    return keyset_page(
        filter_sessions(search=search, agent=agent, gateway=gateway).for_console(),
        cursor=cursor,
        limit=limit,
        order_field="updated_at",
    )


def page_transcript(session_id: str, *, cursor: str | None = None, limit: int = 100) -> Page:
    """Transcript entries oldest first, as the checkpoint sees them."""
    return keyset_page(
        TranscriptEntry.objects.here().filter(session_id=session_id),
        cursor=cursor,
        limit=limit,
        newest_first=False,
    )


def get_session_or_404(session_key: str) -> Session:
    key = canonicalize_session_key(session_key)
    session = Session.objects.here().filter(session_key=key).first() if key else None
    if session is None:
        raise KeyError(f"Session not found: {key}")
    return session
