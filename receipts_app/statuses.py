"""The receipt status vocabulary, and the named groups every surface uses.

``status`` is free text in the ledger (an import never rejects an unknown value); these are the
statuses the product writes or reads. Upstream OpenSquilla's come first, then the four this
product adds so an operator has a way out of a failure, and the scrub's ``checkpoint_missing``
(docs/STATUSES.md says what moves each).

Every page, count, filter, rule and task asks this module which statuses belong to a group, so a
count and the link that lists its rows cannot disagree.
"""

from __future__ import annotations

# --- upstream's vocabulary ------------------------------------------------------------------
CHECKPOINT_SAVED = "checkpoint_saved"
CHECKPOINT_FAILED = "checkpoint_failed"
PREIMAGE_SAVED = "preimage_saved"
FLUSH_APPENDED = "flush_appended"
REPAIR_PENDING = "repair_pending"
REPAIR_RUNNING = "repair_running"
REPAIR_DONE = "repair_done"
REPAIR_FAILED = "repair_failed"
REPAIR_ABANDONED = "repair_abandoned"
DISTILL_FAILED = "distill_failed"
FLUSH_FAILED = "flush_failed"
RECEIPT_ORPHANED = "receipt_orphaned"
HASH_MISMATCH = "hash_mismatch"

# --- added by this product ------------------------------------------------------------------
CHECKPOINT_REQUEUED = "checkpoint_requeued"
CHECKPOINT_RECOVERED = "checkpoint_recovered"
CHECKPOINT_SUPERSEDED = "checkpoint_superseded"
ACKNOWLEDGED = "acknowledged"
# An open flush, pre-image or repair row that its gateway's upgrade to 0.5.5+ deleted upstream
# (migration V044 retires the flush and repair pipelines): kept here with its history, no
# longer anyone's backlog or at risk (docs/STATUSES.md, docs/MIRROR.md).
RETIRED_UPSTREAM = "retired_upstream"
# A saved checkpoint whose file the scrub (receipts_app.scrub) no longer finds where the receipt
# says it is. Upstream has no word for it; a damaged file is upstream's ``hash_mismatch``.
CHECKPOINT_MISSING = "checkpoint_missing"

# --- groups -----------------------------------------------------------------------------------
# The order of the console's status tabs: what needs an operator first.
KNOWN_STATUSES: tuple[str, ...] = (
    CHECKPOINT_FAILED,
    REPAIR_FAILED,
    REPAIR_ABANDONED,
    REPAIR_PENDING,
    REPAIR_RUNNING,
    CHECKPOINT_REQUEUED,
    CHECKPOINT_SAVED,
    PREIMAGE_SAVED,
    FLUSH_APPENDED,
    REPAIR_DONE,
    CHECKPOINT_RECOVERED,
    CHECKPOINT_SUPERSEDED,
    ACKNOWLEDGED,
    RETIRED_UPSTREAM,
    DISTILL_FAILED,
    FLUSH_FAILED,
    RECEIPT_ORPHANED,
    HASH_MISMATCH,
    CHECKPOINT_MISSING,
)
KNOWN_SCOPES: tuple[str, ...] = ("checkpoint", "preimage", "flush", "repair")
# The scopes upstream's V044 (0.5.5) deletes from a gateway's ledger.
RETIRED_SCOPES: tuple[str, ...] = ("flush", "preimage", "repair")

# Failures no worker will retry by itself: they wait for an operator to requeue or acknowledge.
FAILURE_STATUSES: tuple[str, ...] = (
    CHECKPOINT_FAILED,
    REPAIR_FAILED,
    REPAIR_ABANDONED,
    RECEIPT_ORPHANED,
    HASH_MISMATCH,
    CHECKPOINT_MISSING,
)
# An operator may accept exactly the failures above as final, with a written reason.
ACKNOWLEDGEABLE_STATUSES: tuple[str, ...] = FAILURE_STATUSES
# Repairs whose automatic budget is spent (or that never had one).
TERMINAL_REPAIR_STATUSES: tuple[str, ...] = (REPAIR_FAILED, REPAIR_ABANDONED)
# Rows the repair worker claims when due.
REPAIR_QUEUE_STATUSES: tuple[str, ...] = (REPAIR_PENDING, DISTILL_FAILED, FLUSH_FAILED)
# Rows with a one-click requeue in the console: every status the requeue rules can move (the
# rules still decide the outcome; this keeps the button off successes and in-flight work).
ROW_REQUEUEABLE_STATUSES: tuple[str, ...] = (
    CHECKPOINT_FAILED,
    HASH_MISMATCH,
    CHECKPOINT_MISSING,
    *TERMINAL_REPAIR_STATUSES,
    *REPAIR_QUEUE_STATUSES,
)
SUCCESS_STATUSES: tuple[str, ...] = (
    CHECKPOINT_SAVED,
    PREIMAGE_SAVED,
    FLUSH_APPENDED,
    REPAIR_DONE,
    CHECKPOINT_RECOVERED,
    CHECKPOINT_SUPERSEDED,
)
# Statuses that close a failure without replaying it; health never counts them as errors.
RESOLVED_STATUSES: tuple[str, ...] = (CHECKPOINT_RECOVERED, CHECKPOINT_SUPERSEDED, ACKNOWLEDGED)
# Rows no memory waits on any more: resolved, or retired by their gateway's upgrade to 0.5.5+
# (they left its backlog and its at-risk counts). Health's hash-mismatch heuristic never counts
# them, whatever their reason says.
CLOSED_STATUSES: tuple[str, ...] = (*RESOLVED_STATUSES, RETIRED_UPSTREAM)
# Memory AT RISK, the one definition: failures no worker will retry by itself (waiting for an
# operator), and requeued checkpoints until the worker recovers them. The overview's cards,
# the failure groups, time at risk, health's ``atRisk``, ``/metrics`` and the at-risk alert
# all count exactly these (``health.at_risk_by_gateway_agent``), so their numbers agree.
AT_RISK_STATUSES: tuple[str, ...] = (*FAILURE_STATUSES, CHECKPOINT_REQUEUED)
# Health's memory-safety errors: content that is not safe anywhere yet (upstream's
# checkpoint_failed, receipt_orphaned and hash_mismatch). A requeued checkpoint stays one until
# the worker recovers it.
MEMORY_SAFETY_ERROR_STATUSES: tuple[str, ...] = (
    CHECKPOINT_FAILED,
    CHECKPOINT_REQUEUED,
    RECEIPT_ORPHANED,
    HASH_MISMATCH,
    CHECKPOINT_MISSING,
)
# A saved checkpoint the scrub found unsafe on disk: gone, or not the bytes the receipt
# records. Only checkpoint-scope rows in these statuses are retaken by a requeue, and only
# rows the scrub itself moved here are moved back when a later scrub finds the file whole.
SCRUB_VERDICT_STATUSES: tuple[str, ...] = (CHECKPOINT_MISSING, HASH_MISMATCH)
