"""Deterministic checkpoints: JSONL transcript snapshots plus their receipts (docs/UPSTREAM.md#checkpoints).

The hashes, ids, paths and file bytes are byte-compatible with OpenSquilla 0.3.0; the golden
tests pin them. ``record_memory_checkpoint`` calls ``append_checkpoint_events`` through this package's
attribute, looked up at call time, so a test replaces ``receipts_app.checkpoint.append_checkpoint_events``
(the seam upstream's tests use on ``opensquilla.memory.checkpoint``).
"""

from .events import DEFAULT_SOURCE, build_checkpoint_events, serialise_checkpoint_events
from .hashing import checkpoint_coverage_hash, checkpoint_event_hash, checkpoint_turn_id
from .record import CheckpointTimeoutError, arecord_memory_checkpoint, record_memory_checkpoint
from .writer import CHECKPOINT_DIR, append_checkpoint_events, checkpoint_relative_path

__all__ = [
    "CHECKPOINT_DIR",
    "DEFAULT_SOURCE",
    "CheckpointTimeoutError",
    "append_checkpoint_events",
    "arecord_memory_checkpoint",
    "build_checkpoint_events",
    "checkpoint_coverage_hash",
    "checkpoint_event_hash",
    "checkpoint_relative_path",
    "checkpoint_turn_id",
    "record_memory_checkpoint",
    "serialise_checkpoint_events",
]
