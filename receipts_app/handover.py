"""Who repairs a gateway's rows, and what its upgrade to 0.5.5+ left undistilled
(docs/MIRROR.md, "Nothing done to a gateway unasked" and "Followed through the 0.5.5 upgrade").

- :func:`set_repairs` is the one way to hand a gateway's repairs to this console or give them
  back (``Gateway.repairs``): console admins only, recorded as a ``repairs_handover`` event.
- :func:`retired_counts` counts, per gateway, the receipts its upgrade retired (one query).
- :func:`undistilled_archives` lists, per gateway and agent, the raw-fallback archives its
  retired rows name that no repair has distilled: nothing upstream will any more (0.5.5
  removed the pipeline), so they wait for an operator to hand their repair to this console.
  They are read from the ledger (the paths the gateway's own rows recorded), not from its
  disk, which only its own host has.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.db.models import Count, Q

from opensquilla_site.acting import Actor, acting_as
from sessions_app.gateways import (
    REPAIRS_CONSOLE,
    REPAIRS_GATEWAY,
    Gateway,
    gateway_scope,
    known_gateway,
    repairs_are_ours,
)

from . import audit
from .mirror.models import MirroredReceipt
from .models import MemoryDurableReceipt
from .repair import RAW_FALLBACK_PREFIX
from .statuses import REPAIR_DONE, REPAIR_QUEUE_STATUSES, REPAIR_RUNNING

HANDOVER_ACTION = "repairs_handover"
REPAIRS_LABELS = {REPAIRS_GATEWAY: "the gateway's own", REPAIRS_CONSOLE: "this console"}
_CHUNK = 500


class HandoverError(ValueError):
    """A repairs setting that is not ``gateway`` or ``console``."""


def set_repairs(name: str, repairs: str, *, actor: Actor, reason: str = "") -> Gateway:
    """Make gateway ``name``'s repairs ``console`` (this console's periodic repair pass and
    legacy-archive import run for it) or ``gateway`` (its own repair loop; this console only
    acts when an operator asks). Raises ``HandoverError`` for another value and ``KeyError``
    for an unknown gateway. Recorded (who, when, from, to) even when nothing changes, so the
    trail shows every decision."""
    if repairs not in REPAIRS_LABELS:
        raise HandoverError(f"repairs must be {REPAIRS_GATEWAY!r} or {REPAIRS_CONSOLE!r}")
    known_gateway(name)
    with transaction.atomic(), acting_as(actor):
        gateway = Gateway.objects.select_for_update().get(name=name)
        before = REPAIRS_CONSOLE if gateway.repairs_here else REPAIRS_GATEWAY
        Gateway.objects.filter(name=name).update(repairs=repairs)
        gateway.repairs = repairs
        audit.record_event(
            receipt_id="",
            action=HANDOVER_ACTION,
            outcome=repairs,
            reason=reason or None,
            gateway=name,
            details={
                "gateway": name,
                "from": REPAIRS_LABELS[before],
                "to": REPAIRS_LABELS[repairs],
            },
        )
    return gateway


def repairs_of(gateway: Gateway) -> str:
    """``console`` or ``gateway``: who repairs its rows now (its default resolved)."""
    return REPAIRS_CONSOLE if repairs_are_ours(gateway.name, gateway.repairs) else REPAIRS_GATEWAY


def retired_counts() -> dict[str, int]:
    """Gateway → how many of its receipts its upgrade to 0.5.5+ retired (one query)."""
    qs = MirroredReceipt.objects.filter(retired_at__isnull=False)
    scope = gateway_scope()
    if scope is not None:
        qs = qs.filter(source__gateway_id=scope)
    rows = qs.order_by().values("source__gateway_id").annotate(n=Count("id"))
    return {str(r["source__gateway_id"]): int(r["n"]) for r in rows}


@dataclass
class Archive:
    path: str
    reason: str = ""
    newest_at: int = 0
    receipt_ids: list[str] = field(default_factory=list)  # the retired rows that name it
    queued_here: str = ""  # the status of a repair row of ours for it, if one waits or runs

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "reason": self.reason,
            "newest_at": self.newest_at,
            "receipt_ids": self.receipt_ids,
            "queued_here": self.queued_here or None,
        }


@dataclass
class AgentArchives:
    gateway: str
    agent_id: str
    archives: list[Archive] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gateway": self.gateway,
            "agent_id": self.agent_id,
            "count": len(self.archives),
            "archives": [a.to_dict() for a in self.archives],
        }


def _archive_path(source_path: str | None, target_path: str | None) -> str | None:
    for path in (source_path, target_path):
        if path and path.startswith(RAW_FALLBACK_PREFIX):
            return path
    return None


def _chunks(items: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def undistilled_archives(gateway: str | None = None) -> list[AgentArchives]:
    """Per (gateway, agent), the raw-fallback archives named by receipts the gateway's
    upgrade retired and not distilled by any repair (``repair_done``) of that gateway, newest
    first: ``gateway``'s, or every gateway's (the one an edge chose). Queries: one for the
    retired keys, one per 500 of them, one for the repairs of those paths."""
    keys = MirroredReceipt.objects.filter(retired_at__isnull=False)
    name = gateway or gateway_scope()
    if name is not None:
        keys = keys.filter(source__gateway_id=name)
    by_gateway: dict[str, list[str]] = {}
    for gw, key in keys.order_by().values_list("source__gateway_id", "idempotency_key"):
        by_gateway.setdefault(str(gw), []).append(key)
    found: dict[tuple[str, str], Archive] = {}  # (gateway, path)
    agents: dict[tuple[str, str], str] = {}
    done: set[tuple[str, str]] = set()
    for gw, gw_keys in sorted(by_gateway.items()):
        for chunk in _chunks(sorted(set(gw_keys))):
            rows = MemoryDurableReceipt._base_manager.filter(
                gateway_id=gw, idempotency_key__in=chunk
            ).values_list(
                "agent_id",
                "source_path",
                "target_path",
                "reason",
                "created_at",
                "status",
                "receipt_id",
            )
            for agent, source_path, target_path, reason, created, status, rid in rows:
                path = _archive_path(source_path, target_path)
                if path is None:
                    continue
                if status == REPAIR_DONE:
                    done.add((gw, path))
                archive = found.setdefault((gw, path), Archive(path=path))
                agents.setdefault((gw, path), agent or "main")
                archive.receipt_ids.append(rid)
                archive.newest_at = max(archive.newest_at, created)
                # The repair row's reason says why the flush fell back; a pre-image's says less.
                if reason and (reason != "preimage" or not archive.reason):
                    archive.reason = reason
    if found:
        paths = sorted({path for _gw, path in found})
        ours = MemoryDurableReceipt._base_manager.filter(
            gateway_id__in=sorted(by_gateway),
            status__in=(REPAIR_DONE, REPAIR_RUNNING, *REPAIR_QUEUE_STATUSES),
        ).filter(Q(source_path__in=paths) | Q(target_path__in=paths))
        for gw, source_path, target_path, status in ours.values_list(
            "gateway_id", "source_path", "target_path", "status"
        ):
            for path in (source_path, target_path):
                if path is None or (gw, path) not in found:
                    continue
                if status == REPAIR_DONE:
                    done.add((gw, path))
                else:
                    found[(gw, path)].queued_here = status
    grouped: dict[tuple[str, str], AgentArchives] = {}
    for (gw, path), archive in found.items():
        if (gw, path) in done:
            continue
        agent = agents[(gw, path)]
        group = grouped.setdefault((gw, agent), AgentArchives(gateway=gw, agent_id=agent))
        archive.receipt_ids.sort()
        group.archives.append(archive)
    for group in grouped.values():
        group.archives.sort(key=lambda a: (-a.newest_at, a.path))
    return [grouped[k] for k in sorted(grouped)]
