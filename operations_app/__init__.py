"""Operations signals: probes, Prometheus metrics, heartbeats, liveness, alerts, time at risk.

A separate app because it owns its own tables (heartbeats, counters, task statistics, alert
rules and deliveries, risk intervals and rollups), migrations and admin, and reads the ledger
only through ``receipts_app``'s public readers; the ledger depends on it only for two small
hooks (requeue counters and failure intervals).
"""
