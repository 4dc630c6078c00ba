"""Rows gone upstream: marked, never deleted.

A session deleted upstream (0.5.x purges its receipts with it) or a table emptied by a profile
consolidation must not wipe local history. The reconciliation compares the source's keys with
what this source mirrored: missing ones get ``gone_at`` (and each receipt a ``gone_upstream``
audit event); keys that came back lose it. The ledger rows stay as they are.

A gateway upgraded to 0.5.5+ (its ledger in the V044 shape, ``importer.schema``) deleted every
flush, pre-image and repair receipt at the upgrade. Those are **retired**, not gone: the
mirror's record gets ``retired_at`` (``gone_at`` stays empty, or is cleared when an earlier
reconciliation took them for deleted while their session is still upstream), each gets a
``retired_upstream`` event, and an open one (at risk, queued, running) moves to the status
``retired_upstream``, so it leaves the gateway's backlog and at-risk counts; a closed one keeps
its status. Their history stays here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import transaction

from opensquilla_site.timeutil import now_ms
from sessions_app.keys import canonicalize_session_key

from .. import audit
from ..importer.source import SourceDatabase
from ..memory_gap import OPEN_STATUSES
from ..models import MemoryDurableReceipt
from ..statuses import RETIRED_SCOPES, RETIRED_UPSTREAM
from .models import MirroredReceipt, MirroredSession, MirrorSource
from .sync import MIRROR_ACTOR, lock_source

_CHUNK = 500
RETIRED_REASON = "retired by the gateway's upgrade to 0.5.5+ (V044); kept here"


@dataclass
class Reconciled:
    sessions_gone: int = 0
    receipts_gone: int = 0
    came_back: int = 0
    receipts_retired: int = 0


def _chunks(keys: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(keys), _CHUNK):
        yield keys[start : start + _CHUNK]


def reconcile(*, source_id: int, db: SourceDatabase, owner: str, lease_ms: int) -> Reconciled:
    """Mark what the source no longer has; un-mark what it has again. One transaction."""
    upstream_sessions = {canonicalize_session_key(k) for k in db.keys("sessions")}
    upstream_receipts = db.keys("memory_durable_receipts")
    retired_ledger = db.schema_version().ledger_retired
    result = Reconciled()
    stamp = now_ms()
    with transaction.atomic(), audit.acting_as(MIRROR_ACTOR):
        src = lock_source(source_id, owner, lease_ms)
        src.save(update_fields=["lease_owner", "lease_until"])
        for model, key_field, upstream in (
            (MirroredSession, "session_key", upstream_sessions),
            (MirroredReceipt, "idempotency_key", upstream_receipts),
        ):
            # A retired receipt stays retired (V044 deleted it for good).
            retired_kept = {"retired_at__isnull": True} if model is MirroredReceipt else {}
            rows = model.objects.filter(source=src, **retired_kept).values_list(
                key_field, "gone_at"
            )
            gone = sorted(key for key, gone_at in rows if gone_at is None and key not in upstream)
            back = sorted(key for key, gone_at in rows if gone_at is not None and key in upstream)
            if model is MirroredReceipt and retired_ledger:
                earlier = [k for k, at in rows if at is not None and k not in upstream]
                retired = _retire(src, gone, earlier, upstream_sessions, stamp)
                result.receipts_retired = len(retired)
                gone = [k for k in gone if k not in retired]
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


def _retire(
    src: MirrorSource,
    missing: list[str],
    earlier: list[str],
    upstream_sessions: set[str],
    stamp: int,
) -> set[str]:
    """Retire the flush, pre-image and repair receipts a V044 ledger no longer has: every one
    missing now, and those an earlier pass marked gone whose session is still upstream (a
    delete would have taken the session too). Returns their keys."""
    found: list[tuple[str, str, str, str]] = []
    for chunk in _chunks([*missing, *earlier]):
        found.extend(
            MemoryDurableReceipt.objects.here()
            .filter(idempotency_key__in=chunk, scope__in=RETIRED_SCOPES)
            .values_list("idempotency_key", "receipt_id", "session_key", "status")
        )
    was_gone = set(earlier)
    rows = [r for r in found if r[0] not in was_gone or r[2] in upstream_sessions]
    keys = sorted({r[0] for r in rows})
    for chunk in _chunks(keys):
        MirroredReceipt.objects.filter(source=src, idempotency_key__in=chunk).update(
            retired_at=stamp, gone_at=None
        )
        MemoryDurableReceipt.objects.here().filter(
            idempotency_key__in=chunk, status__in=OPEN_STATUSES
        ).update(status=RETIRED_UPSTREAM, updated_at=stamp)
    audit.record_events(
        [
            audit.build_event(
                receipt_id=receipt_id,
                session_key=session_key,
                action="retired_upstream",
                from_status=status,
                to_status=RETIRED_UPSTREAM if status in OPEN_STATUSES else status,
                reason=RETIRED_REASON,
                details={"via": "mirror", "upgrade": "V044__retire_legacy_memory_flush"},
                at_ms=stamp,
            )
            for _key, receipt_id, session_key, status in rows
        ]
    )
    return set(keys)


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
