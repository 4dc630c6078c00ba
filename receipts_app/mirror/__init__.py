"""Live mirror of a running OpenSquilla gateway's ``sessions.db`` (docs/MIRROR.md).

A follower (``manage.py import_opensquilla PATH --follow``) reads the source read-only, applies
what changed through the importer's row mapping and the ledger, and records its state for the
overview, the health API and ``/metrics`` (:func:`receipts_app.mirror.state.mirror_states`).

Modules: ``models`` (per-source cursor, lease and state; what each mirrored row looked like
upstream), ``watch`` (opening the file and spotting changes and replacement), ``sync`` (one
pass from the cursor), ``reconcile`` (rows gone upstream), ``follower`` (the loop and its
error handling), ``state`` (what operators see).
"""
