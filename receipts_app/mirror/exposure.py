"""What a viewer may read of where the ledger comes from.

A follower's state names the gateway's ``sessions.db`` path, its workspace, the follower's
``host:pid`` and the raw error it met (which often quotes a path): details for the operators
who run the mirror, not for a read-only viewer. Viewers (the console's viewer role, an API
caller with the ``read`` scope only) get the same entries with those fields emptied; the
state, lag, counts and the gateway's name stay, so a viewer still sees whether the mirror
works.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

T = TypeVar("T")

# Emptied for a viewer; ``error_code`` stays (a fixed word, never a path).
HIDDEN_FIELDS = ("source", "workspace", "follower", "error")


def mirror_for_viewer(states: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**s, **dict.fromkeys(HIDDEN_FIELDS, "")} for s in states]


def fleet_for_viewer(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``receipts_app.gateways.fleet`` rows without the source path and mirror details."""
    return [
        {
            **row,
            "source": "",
            "mirror": mirror_for_viewer(row.get("mirror") or []),
        }
        for row in rows
    ]


def marks_for_viewer(marks: Iterable[T]) -> list[T]:
    """A mirrored row's provenance marks (dataclasses with a ``source`` path) without the path:
    the page names the row's gateway instead."""
    return [replace(m, source="") for m in marks]  # type: ignore[type-var]
