"""The plan a database picks for a statement, to check it reads the index meant for it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection


def plan_of(sql: str, params: Sequence[Any] = ()) -> str:
    """The plan of ``sql`` as text. On PostgreSQL sequential and bitmap scans are switched off
    for it: a test table of a few rows would be scanned whatever the indexes, so the question
    asked is whether the index can serve the statement at all."""
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SET LOCAL enable_seqscan = off")
            cur.execute("SET LOCAL enable_bitmapscan = off")
            cur.execute(f"EXPLAIN {sql}", params)
        else:
            cur.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row) for row in cur.fetchall())
