"""Rows gone upstream: marked, never deleted.

A session deleted upstream (0.5.x purges its receipts with it) or a table emptied by a profile
consolidation must not wipe local history. The reconciliation compares the source's keys with
what this source mirrored: missing ones get ``gone_at`` (and each receipt a ``gone_upstream``
audit event); keys that came back lose it. The ledger rows stay as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction

from opensquilla_site.timeutil import now_ms
from sessions_app.keys import canonicalize_session_key

from .. import audit
from ..importer.source import SourceDatabase
from ..models import MemoryDurableReceipt
from .models import MirroredReceipt, MirroredSession
from .sync import MIRROR_ACTOR, lock_source

_CHUNK = 500


@dataclass
class Reconciled:
    sessions_gone: int = 0
    receipts_gone: int = 0
    came_back: int = 0


def _chunks(keys: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(keys), _CHUNK):
        yield keys[start : start + _CHUNK]


def reconcile(*, source_id: int, db: SourceDatabase, owner: str, lease_ms: int) -> Reconciled:
    """Mark what the source no longer has; un-mark what it has again. One transaction."""
    upstream_sessions = {canonicalize_session_key(k) for k in db.keys("sessions")}
    upstream_receipts = db.keys("memory_durable_receipts")
    result = Reconciled()
    stamp = now_ms()
    with transaction.atomic(), audit.acting_as(MIRROR_ACTOR):
        src = lock_source(source_id, owner, lease_ms)
        src.save(update_fields=["lease_owner", "lease_until"])
        for model, key_field, upstream in (
            (MirroredSession, "session_key", upstream_sessions),
            (MirroredReceipt, "idempotency_key", upstream_receipts),
        ):
            rows = model.objects.filter(source=src).values_list(key_field, "gone_at")
            gone = sorted(key for key, gone_at in rows if gone_at is None and key not in upstream)
            back = sorted(key for key, gone_at in rows if gone_at is not None and key in upstream)
            for chunk in _chunks(gone):
                model.objects.filter(source=src, **{f"{key_field}__in": chunk}).update(
                    gone_at=stamp
                )
            for chunk in _chunks(back):
                model.objects.filter(source=src, **{f"{key_field}__in": chunk}).update(gone_at=None)
            result.came_back += len(back)
            if model is MirroredSession:
                result.sessions_gone = len(gone)
            else:
                result.receipts_gone = len(gone)
                _record_gone(gone, str(db.path), stamp)
    return result


def _record_gone(keys: list[str], source: str, stamp: int) -> None:
    for chunk in _chunks(keys):
        rows = (
            MemoryDurableReceipt.objects.here()
            .filter(idempotency_key__in=chunk)
            .values_list("receipt_id", "session_key", "status")
        )
        audit.record_events(
            [
                audit.build_event(
                    receipt_id=receipt_id,
                    session_key=session_key,
                    action="gone_upstream",
                    from_status=status,
                    to_status=status,
                    reason="no longer in the OpenSquilla source; kept here",
                    details={"source": source},
                    at_ms=stamp,
                )
                for receipt_id, session_key, status in rows
            ]
        )
