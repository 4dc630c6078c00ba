"""The mirror's state as operators, the health API and ``/metrics`` see it.

:func:`mirror_states` is the one reader. A follower writes its heartbeat at least every
``HEARTBEAT_MS``; one not heard from for ``stale_after_ms`` counts as stopped, whatever its
last recorded state says (a killed process records nothing).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, IntegerField, Model, OuterRef, Subquery

from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import gateway_scope

from ..importer import ImportSourceError
from .models import MirroredReceipt, MirroredSession, MirrorSkippedRow, MirrorSource
from .sources import ConfiguredSource, configured_sources

HEARTBEAT_MS = 10_000
MIN_STALE_MS = 30_000

# Status names, worst first: what the overview badge and /metrics show.
STOPPED = "stopped"
FAILING = "failing"
WARNING = "warning"
IMPORTING = "importing"
OK = "ok"
HEALTHY_STATUSES = (OK, IMPORTING)


def stale_after_ms(interval_seconds: float) -> int:
    return max(MIN_STALE_MS, int(interval_seconds * 3000) + HEARTBEAT_MS)


def _status(src: MirrorSource, now: int) -> str:
    if not src.heartbeat_at or now - src.heartbeat_at > stale_after_ms(src.interval_seconds):
        return STOPPED
    if src.error:
        return FAILING
    if src.warning:
        return WARNING
    if src.phase == "importing":
        return IMPORTING
    return OK


def _gone_count(model: type[Model]) -> Subquery:
    rows = (
        model._default_manager.filter(source=OuterRef("pk"), gone_at__isnull=False)
        .order_by()
        .values("source")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return Subquery(rows, output_field=IntegerField())


def _behind(src: MirrorSource, now: int) -> int | None:
    return None if src.last_sync_at is None else max(0, now - src.last_sync_at)


def _lag_seconds(lag_ms: int | None, behind_ms: int | None, status: str) -> float | None:
    if status in HEALTHY_STATUSES or status == WARNING:
        return None if lag_ms is None else lag_ms / 1000
    candidates = [v for v in (lag_ms, behind_ms) if v is not None]
    return max(candidates) / 1000 if candidates else None


def _configured() -> list[ConfiguredSource]:
    try:
        return configured_sources()
    except ImportSourceError:
        return []  # run_mirror reports the bad setting; the overview shows what runs


def mirror_states() -> list[dict[str, Any]]:
    """One dict per followed source (plus a configured source no follower has started):

    ``source`` (path), ``workspace``, ``status`` (ok/importing/warning/failing/stopped),
    ``healthy`` (bool), ``phase`` (starting/importing/following), ``heartbeat_at``,
    ``last_sync_at`` (last pass that caught up), ``last_change_at`` (last pass that applied
    rows), ``lag_ms`` (upstream stamp of the newest applied row to our commit, last change),
    ``behind_ms`` (now - last_sync_at), ``lag_seconds`` (``lag_ms`` while healthy, else the
    larger of it and ``behind_ms``: what /metrics and alerts read), ``checked_at`` (the
    follower's last look at its source, = heartbeat), ``error``, ``error_code``, ``error_since``,
    ``warning``, ``rows_applied``, ``sessions_gone``, ``receipts_gone``, ``follower`` (lease
    holder), ``gateway`` (the name its rows belong to), ``schema_version`` and
    ``opensquilla_version`` (what the gateway's file was at when last read), ``skipped``
    (rows the mirror did not apply, per kind and reason: ``[{"kind", "reason", "count"}]``,
    most first) and ``skipped_total``. Times are epoch ms, None when unknown. Two queries.
    """
    now = now_ms()
    scope = gateway_scope()  # every gateway's sources unless an edge chose one
    followed = (
        MirrorSource.objects.all()
        if scope is None
        else MirrorSource.objects.filter(gateway_id=scope)
    )
    sources = list(
        followed.select_related("gateway")
        .annotate(
            n_sessions_gone=_gone_count(MirroredSession),
            n_receipts_gone=_gone_count(MirroredReceipt),
        )
        .order_by("gateway_id", "path")
    )
    skipped = _skipped_by_source([src.pk for src in sources])
    states = [
        {
            "source": src.path,
            "workspace": src.workspace,
            "status": (status := _status(src, now)),
            "healthy": status in HEALTHY_STATUSES,
            "phase": src.phase,
            "heartbeat_at": src.heartbeat_at or None,
            "last_sync_at": src.last_sync_at,
            "last_change_at": src.last_change_at,
            "lag_ms": src.lag_ms,
            "behind_ms": (behind := _behind(src, now)),
            # For /metrics and alerts: the last change's lag while healthy; once stopped or
            # failing, how long ago it last caught up (it grows until the mirror recovers).
            "lag_seconds": _lag_seconds(src.lag_ms, behind, status),
            "checked_at": src.heartbeat_at or None,
            "error": src.error,
            "error_code": src.error_code,
            "error_since": src.error_since,
            "warning": src.warning,
            "rows_applied": src.rows_applied,
            "sessions_gone": getattr(src, "n_sessions_gone", 0) or 0,
            "receipts_gone": getattr(src, "n_receipts_gone", 0) or 0,
            "follower": src.lease_owner,
            "gateway": src.gateway_id,
            # What the gateway's file was at when last read (importer/schema.py's label).
            "schema_version": src.gateway.schema_version,
            "opensquilla_version": src.gateway.opensquilla_version,
            "source_id": src.pk,
            "skipped": skipped.get(src.pk, []),
            "skipped_total": sum(int(r["count"]) for r in skipped.get(src.pk, [])),
        }
        for src in sources
    ]
    started = {(s["gateway"], s["source"]) for s in states}
    for configured in reversed(_configured()):
        if scope is not None and configured.gateway != scope:
            continue
        path = str(configured.db_path.expanduser().resolve())
        if (configured.gateway, path) not in started:
            states.insert(0, _never_started(configured, path))
    return states


def _skipped_by_source(source_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    if not source_ids:
        return {}
    grouped: dict[int, list[dict[str, Any]]] = {}
    rows = (
        MirrorSkippedRow.objects.filter(source_id__in=source_ids)
        .values("source_id", "kind", "reason")
        .annotate(count=Count("pk"))
        .order_by("source_id", "-count", "kind", "reason")
    )
    for row in rows:
        grouped.setdefault(row["source_id"], []).append(
            {"kind": row["kind"], "reason": row["reason"], "count": row["count"]}
        )
    return grouped


def skipped_rows(limit: int = 200) -> list[MirrorSkippedRow]:
    """The rows the mirror skipped, newest first (every gateway's unless an edge chose one),
    for the liveness page's list."""
    scope = gateway_scope()
    rows = MirrorSkippedRow.objects.select_related("source")
    if scope is not None:
        rows = rows.filter(source__gateway_id=scope)
    return list(rows.order_by("-last_seen_at", "-pk")[:limit])


def _never_started(configured: ConfiguredSource, path: str) -> dict[str, Any]:
    return {
        "source": path,
        "gateway": configured.gateway,
        "workspace": str(configured.workspace or ""),
        "status": STOPPED,
        "healthy": False,
        "phase": "starting",
        "heartbeat_at": None,
        "last_sync_at": None,
        "last_change_at": None,
        "lag_ms": None,
        "behind_ms": None,
        "lag_seconds": None,
        "checked_at": None,
        "error": (
            "OPENSQUILLA_SOURCE_DB is set"
            if configured.gateway == "local"
            else f"OPENSQUILLA_SOURCES names gateway {configured.gateway}"
        )
        + " but no follower has started "
        "(run `manage.py run_mirror`, or `make run`)",
        "error_code": "not_started",
        "error_since": None,
        "warning": "",
        "rows_applied": 0,
        "sessions_gone": 0,
        "receipts_gone": 0,
        "follower": "",
        "schema_version": "",
        "opensquilla_version": "",
        "source_id": None,
        "skipped": [],
        "skipped_total": 0,
    }
