"""Which RPCs a gateway no longer answers, from what it says it runs (docs/MIRROR.md,
"Followed through the 0.5.5 upgrade").

OpenSquilla 0.5.5 (PR #1688) removed the flush and repair pipelines with their RPCs
(``memory.repair.*``). A gateway is known to have lost them when its hello names a version
from 0.5.5 on, or when the mirror found its ledger retired (migration V044) whatever version
the last reading saw. Pages ask :func:`unanswered_methods` before offering an action that needs
one, and say which they are.
"""

from __future__ import annotations

import re

# Removed by 0.5.5 (docs/UPSTREAM.md names the three the CLI called).
RETIRED_IN_0_5_5: tuple[str, ...] = (
    "memory.repair.list",
    "memory.repair.run",
    "memory.repair.show",
)
RETIRED_SINCE = (0, 5, 5)
_VERSION = re.compile(r"(\d+)\.(\d+)\.(\d+)")


def version_tuple(version: str | None) -> tuple[int, int, int] | None:
    """``0.5.6`` (or ``v0.5.6rc1``) → (0, 5, 6); None when it names no version."""
    found = _VERSION.search(version or "")
    if found is None:
        return None
    major, minor, patch = (int(part) for part in found.groups())
    return major, minor, patch


def unanswered_methods(version: str | None, *, ledger_retired: bool = False) -> tuple[str, ...]:
    """The RPCs this product uses that a gateway running ``version`` (its hello's
    ``server.version``) no longer answers; ``ledger_retired``: its ledger is in the V044 shape."""
    parsed = version_tuple(version)
    if ledger_retired or (parsed is not None and parsed >= RETIRED_SINCE):
        return RETIRED_IN_0_5_5
    return ()
