"""The link to a gateway's own RPC: what the gateway itself believes about its memory.

Read-only apart from ``run_due_repairs``. Not wired into models, beat, pages or /metrics
yet (docs/MIRROR.md#gateway-link says what that needs).
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
