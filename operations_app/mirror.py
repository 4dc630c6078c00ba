"""The live mirror's state, as the operations pages, metrics and alerts need it.

osq11's mirror (``receipts_app.mirror.state.mirror_states()``) may not be installed in this
build: then there is simply no mirror, and nothing here fails.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from opensquilla_site import timeutil

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MirrorView:
    source: str
    state: str
    lag_seconds: float | None
    checked_at: int | None  # epoch ms of the mirror's last look at its source
    gateway: str = "local"  # the gateway the source's rows belong to


def _field(state: Any, *names: str) -> Any:
    for name in names:
        value = state.get(name) if isinstance(state, dict) else getattr(state, name, None)
        if value is not None:
            return value
    return None


def _to_view(state: Any, now: int) -> MirrorView:
    lag = _field(state, "lag_seconds")
    if lag is None:
        lag_ms = _field(state, "lag_ms")
        lag = lag_ms / 1000 if isinstance(lag_ms, int | float) else None
    checked = _field(state, "checked_at", "updated_at", "last_poll_at", "last_seen_at")
    return MirrorView(
        source=str(_field(state, "source", "source_path", "path", "name") or "mirror"),
        state=str(_field(state, "state", "status") or "unknown"),
        lag_seconds=float(lag) if isinstance(lag, int | float) else None,
        checked_at=int(checked) if isinstance(checked, int | float) else None,
        gateway=str(_field(state, "gateway") or "local"),
    )


def mirror_views() -> list[MirrorView]:
    """Every mirror's state; empty when the mirror module is absent or not running."""
    try:
        from receipts_app.mirror.state import (  # type: ignore[import-not-found, unused-ignore]
            mirror_states,
        )
    except ImportError:
        return []
    now = timeutil.now_ms()
    try:
        return [_to_view(state, now) for state in mirror_states()]
    except Exception:  # noqa: BLE001 - a broken mirror reader must not break a scrape
        logger.warning("could not read the mirror state", exc_info=True)
        return []


@dataclass(frozen=True)
class SkippedRowView:
    source: str
    gateway: str
    kind: str  # session, transcript entry, receipt
    source_rowid: int
    reason: str
    detail: str
    name: str  # the row's key or id, control characters escaped
    first_seen_at: int
    last_seen_at: int


def mirror_skipped_rows(limit: int = 200) -> list[SkippedRowView]:
    """The source rows the mirror did not apply, newest first; empty without the module."""
    try:
        from receipts_app.mirror.state import (  # type: ignore[import-not-found, unused-ignore]
            skipped_rows,
        )
    except ImportError:
        return []
    try:
        return [
            SkippedRowView(
                source=row.source.path,
                gateway=str(row.source.gateway_id or "local"),
                kind=row.kind,
                source_rowid=row.source_rowid,
                reason=row.reason,
                detail=row.detail,
                name=row.name,
                first_seen_at=row.first_seen_at,
                last_seen_at=row.last_seen_at,
            )
            for row in skipped_rows(limit)
        ]
    except Exception:  # noqa: BLE001 - as mirror_views: never break the page on it
        logger.warning("could not read the mirror's skipped rows", exc_info=True)
        return []
