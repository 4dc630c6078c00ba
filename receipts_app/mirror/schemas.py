"""API shape of the mirror's state (``receipts_app.mirror.state.mirror_states``)."""

from __future__ import annotations

from ninja import Schema


class MirrorStateOut(Schema):
    source: str
    workspace: str
    status: str  # ok, importing, warning, failing, stopped
    healthy: bool
    phase: str
    heartbeat_at: int | None
    last_sync_at: int | None
    last_change_at: int | None
    lag_ms: int | None
    behind_ms: int | None
    lag_seconds: float | None
    checked_at: int | None
    error: str
    error_code: str
    error_since: int | None
    warning: str
    rows_applied: int
    sessions_gone: int
    receipts_gone: int
    follower: str
    gateway: str = "local"  # the gateway the source's rows belong to
    # What the gateway's file was at when last read: "25 (V040__document_resources)".
    schema_version: str = ""
    opensquilla_version: str = ""
