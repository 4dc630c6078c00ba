"""The memory gap: receipts the gateway and this console count differently
(docs/MIRROR.md#the-gap).

The mirror keeps the gateway's own last status of every receipt it followed
(``MirroredReceipt.source_status``) beside ours (``MemoryDurableReceipt.status``). An operator
who recovers, acknowledges or supersedes a receipt here changes only ours (the source file is
never written), so the gateway's own health (``doctor.memory.status``) goes on counting it.

A receipt is **open** while something still has to happen to it: it is at risk
(``statuses.AT_RISK_STATUSES``), queued for repair or being repaired. A mirrored receipt, not
gone upstream, is **in the gap** when it is open on one side and not on the other:

- ``gateway``: open at the gateway, closed here (the usual case: an operator recovered or
  acknowledged it here; the gateway still counts it);
- ``here``: open here, closed at the gateway (our worker or an operator put it back to work,
  or the gateway moved on in a way the mirror applied without our row following).

Every count of the gap is counted through ``receipts_app.memory_gap.gap_q``, which is also
the receipts list's ``gap`` filter, so a count and the list it links to cannot disagree (the
predicate sits below the selectors, which may not import the mirror; this module counts).
"""

from __future__ import annotations

from typing import Any

from django.db.models import Count, QuerySet

from ..memory_gap import GAP_SIDES, OPEN_STATUSES, gap_q

__all__ = ["GAP_SIDES", "OPEN_STATUSES", "gap_counts", "gap_q"]


def gap_counts(qs: QuerySet) -> dict[tuple[str, str], dict[str, Any]]:
    """(gateway, agent) → ``{"gateway": n, "here": m, "total": n + m, "by_status": {...}}``
    (``by_status``: our status of the rows in the gap), in one query.

    ``qs`` is a receipts queryset already narrowed to the gap (``filter_receipts`` with
    ``gap``), so these counts are the list's."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    rows = qs.order_by().values("gateway_id", "agent_id", "status").annotate(n=Count("id"))
    for row in rows:
        key = (row["gateway_id"], row["agent_id"])
        entry = out.setdefault(key, {"gateway": 0, "here": 0, "total": 0, "by_status": {}})
        n = int(row["n"])
        entry["here" if row["status"] in OPEN_STATUSES else "gateway"] += n
        entry["total"] += n
        entry["by_status"][row["status"]] = n
    return out
