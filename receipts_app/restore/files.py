"""Where a checkpoint receipt's file is, and whether this process may read it.

A checkpoint lives in its gateway's checkpoint workspace, on that gateway's host. This process
reads only the files of the gateway it serves (``OPENSQUILLA_GATEWAY``, checked by
``sessions_app.gateways.check_served`` as a worker does before touching a file), and only
inside ``OPENSQUILLA_CHECKPOINT_WORKSPACE`` (symlinks followed, then checked).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from sessions_app.gateways import MisroutedWork, check_served, served_gateway

from ..models import MemoryDurableReceipt

# What a receipt's file turned out to be.
READABLE = "readable"
MISSING = "missing"
ELSEWHERE = "elsewhere"
NO_FILE = "no_file"
OUTSIDE = "outside"


@dataclass(frozen=True)
class Located:
    state: str
    stored_path: str
    path: Path | None = None
    message: str = ""


def checkpoint_root() -> Path | None:
    configured = getattr(settings, "OPENSQUILLA_CHECKPOINT_WORKSPACE", None)
    return Path(configured).expanduser().resolve() if configured else None


def elsewhere_message(gateway: str) -> str:
    return (
        f"This checkpoint belongs to gateway {gateway}: its file is in that gateway's workspace, "
        f"on its own host. This console serves gateway {served_gateway()} "
        "(OPENSQUILLA_GATEWAY) and reads only its files. To read it back, open the console of "
        f"a web process started on {gateway}'s host with OPENSQUILLA_GATEWAY={gateway} and "
        "its OPENSQUILLA_CHECKPOINT_WORKSPACE."
    )


def locate_checkpoint(receipt: MemoryDurableReceipt) -> Located:
    """The receipt's checkpoint file, or why it cannot be read here."""
    stored = receipt.source_path or ""
    if receipt.scope != "checkpoint" or not stored or stored.startswith("session:"):
        return Located(NO_FILE, stored, message="This receipt names no checkpoint file.")
    try:
        check_served(receipt.gateway_id, what=f"checkpoint {receipt.receipt_id}")
    except MisroutedWork:
        return Located(ELSEWHERE, stored, message=elsewhere_message(str(receipt.gateway_id)))
    root = checkpoint_root()
    if root is None:
        return Located(
            MISSING, stored, message="OPENSQUILLA_CHECKPOINT_WORKSPACE is not configured here."
        )
    if "\x00" in stored:
        return Located(OUTSIDE, stored, message="The stored path is not a file name.")
    candidate = Path(stored)
    target = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if target != root and root not in target.parents:
        return Located(
            OUTSIDE, stored, message="The stored path is outside the checkpoint workspace."
        )
    if not target.is_file():
        return Located(
            MISSING, stored, path=target, message="The checkpoint file is not in the workspace."
        )
    return Located(READABLE, stored, path=target)
