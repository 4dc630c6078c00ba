"""Console views (HTMX): overview, receipts, requeue plans, audit log, session memory panel."""
