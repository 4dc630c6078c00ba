"""The checkpoint scrub: every saved checkpoint verified where its file lives (docs/STATUSES.md#scrub).

``verify`` reads one file and says what it found (no writes: the call the receipt page's
read-back can make too); ``run`` walks a gateway's checkpoint receipts in cycles, resumable and
throttled, records each outcome (``CheckpointVerification``) and moves a receipt whose file is
gone or damaged into an at-risk status, and back when the file is whole again; ``schedule``
queues the runs to the workers that hold the files; ``summary`` says how much of a gateway's
saved memory was verified within the full cycle.
"""

from __future__ import annotations

from .run import ScrubReport, scrub_checkpoints
from .schedule import queue_scrubs, request_scrub
from .summary import VerifiedSummary, verified_summary
from .verify import Verification, verify_receipt

__all__ = [
    "ScrubReport",
    "Verification",
    "VerifiedSummary",
    "queue_scrubs",
    "request_scrub",
    "scrub_checkpoints",
    "verified_summary",
    "verify_receipt",
]
