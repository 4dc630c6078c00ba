"""Signals the ledger's services send for observers outside ``receipts_app``.

``operations_app`` turns them into its /metrics counters; ``receipts_app`` never imports it
(import-linter's "receipts-below-operations" contract). Receivers run synchronously, inside
the sender's transaction, so a rolled-back requeue takes its count back with it.
"""

from __future__ import annotations

from django.dispatch import Signal

# kwargs: outcomes (mapping of requeue outcome -> how many), plan_rows (rows a plan batch took)
requeue_outcomes_recorded = Signal()

# A long-running process of ours began or ended its work (the mirror's follower processes):
# kwargs kind ("mirror"), name (unique per host), details (gateways, what it does).
# operations_app starts and stops the process's own heartbeat on them (operations_app.pulse),
# so the liveness page lists the process with its host and gateway wherever it runs.
process_started = Signal()
process_stopped = Signal()
