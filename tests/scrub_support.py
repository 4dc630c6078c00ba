"""Checkpoints of gateway b, scrubbed on b's host (the API and console scrub tests)."""

from __future__ import annotations

from receipts_app.checkpoint import record_memory_checkpoint
from receipts_app.scrub import scrub_checkpoints
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_session


def scrubbed_b(settings, workspace, n: int = 2):
    """``n`` checkpoints of gateway b, scrubbed on b's host; the first one's file deleted."""
    ensure_gateway("b")
    settings.OPENSQUILLA_GATEWAY = "b"
    rows = []
    with using_gateway("b"):
        for index in range(n):
            session = make_session(f"agent:main:webchat:v{index}", messages=2)
            rows.append(record_memory_checkpoint(session.session_key))
    (workspace / rows[0].source_path).unlink()
    scrub_checkpoints("b", force=True)
    settings.OPENSQUILLA_GATEWAY = "local"
    return rows
