"""The link to a gateway's own RPC: what the gateway itself believes about its memory.

Read-only apart from ``run_due_repairs``. ``client`` speaks the RPC; ``service`` is the one
place the console uses it (the beat task's readings, an admin's repair run); ``views`` is what
the pages show of the stored readings; ``config`` reads ``OPENSQUILLA_GATEWAY_LINKS``
(docs/MIRROR.md#gateway-link).
"""

from .client import (
    MAX_PROTOCOL,
    MIN_PROTOCOL,
    gateway_ws_url,
    read_memory_status,
    run_due_repairs,
)
from .states import (
    GatewayHello,
    LinkAnswer,
    LinkFailure,
    LinkState,
    MemoryVerdict,
    RepairRun,
)

__all__ = [
    "MAX_PROTOCOL",
    "MIN_PROTOCOL",
    "GatewayHello",
    "LinkAnswer",
    "LinkFailure",
    "LinkState",
    "MemoryVerdict",
    "RepairRun",
    "gateway_ws_url",
    "read_memory_status",
    "run_due_repairs",
]
