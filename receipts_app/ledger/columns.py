"""The ledger's column lists, shared by the ORM paths, the raw SQL and the API schemas."""

from __future__ import annotations

# Columns of the upstream table (docs/UPSTREAM.md#columns), in its order.
LEDGER_FIELDS: tuple[str, ...] = (
    "receipt_id",
    "session_key",
    "session_id",
    "turn_id",
    "scope",
    "source_path",
    "target_path",
    "content_hash",
    "coverage_turn_id",
    "coverage_hash",
    "coverage_entry_count",
    "idempotency_key",
    "status",
    "reason",
    "attempt_count",
    "next_retry_at_ms",
    "created_at",
    "updated_at",
    "schema_version",
)
_IMMUTABLE_ON_CONFLICT = frozenset({"receipt_id", "idempotency_key", "created_at", "gateway_id"})
# What an upsert writes: the upstream columns plus our derived agent column, the requeue link
# and the gateway (sessions_app.gateways: the current one).
WRITE_FIELDS: tuple[str, ...] = (
    *LEDGER_FIELDS,
    "agent_id",
    "resolved_by_receipt_id",
    "gateway_id",
)
# The conflict target: an idempotency key is unique within its gateway.
CONFLICT_TARGET = "gateway_id, idempotency_key"
# What a conflicting upsert overwrites: every written column but the four above (a replayed
# failure is unresolved again, so the requeue link is overwritten too).
CONFLICT_UPDATE_FIELDS: tuple[str, ...] = tuple(
    f for f in WRITE_FIELDS if f not in _IMMUTABLE_ON_CONFLICT
)
UPDATABLE_FIELDS = frozenset(LEDGER_FIELDS + ("resolved_by_receipt_id",)) - {
    "receipt_id",
    "created_at",
}
# The four coverage filters plus the row's identity (gateway, key, generation): the exact
# coverage lookup's fixed shape.
COVERAGE_FILTERS: tuple[str, ...] = (
    "gateway_id",
    "session_key",
    "session_id",
    "scope",
    "status",
    "coverage_turn_id",
    "coverage_hash",
    "coverage_entry_count",
)
