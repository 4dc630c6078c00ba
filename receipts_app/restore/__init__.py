"""Reading a saved checkpoint back: the conversation it holds, how it compares with the
session's transcript, and what would be lost without it (docs/CONSOLE.md#restore).

``readback`` parses the JSONL (no Django), ``matching`` says when a checkpoint entry and a
transcript entry are the same one, ``files`` opens the file where this process may read it,
``service`` answers the console, the API and the downloads, ``loss`` names the entries a
missing or damaged checkpoint took with it, ``markdown`` renders a download.
"""

from .loss import LossReport, LostEntry, loss_for_receipt
from .service import (
    CheckpointElsewhere,
    CheckpointMissing,
    CheckpointUnreadable,
    NotACheckpoint,
    RestoreView,
    checkpoint_jsonl_stream,
    checkpoint_markdown_stream,
    restore_checkpoint,
)

__all__ = [
    "CheckpointElsewhere",
    "CheckpointMissing",
    "CheckpointUnreadable",
    "LossReport",
    "LostEntry",
    "NotACheckpoint",
    "RestoreView",
    "checkpoint_jsonl_stream",
    "checkpoint_markdown_stream",
    "loss_for_receipt",
    "restore_checkpoint",
]
