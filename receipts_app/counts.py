"""Exact receipt counts per (agent, scope, status).

Placeholder until osq15's counts table lands: osq15's version of this module replaces this one
(same ``receipt_counts()`` signature, read from a table kept exact by every ledger write).
This one is a GROUP BY over the ledger, correct but proportional to the table's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count

from .models import MemoryDurableReceipt


@dataclass(frozen=True)
class ReceiptCount:
    agent_id: str
    scope: str
    status: str
    count: int


def receipt_counts() -> list[ReceiptCount]:
    """One row per (agent, scope, status) present in the ledger."""
    rows = (
        MemoryDurableReceipt.objects.order_by()
        .values_list("agent_id", "scope", "status")
        .annotate(n=Count("id"))
    )
    return [ReceiptCount(agent, scope, status, n) for agent, scope, status, n in rows]
