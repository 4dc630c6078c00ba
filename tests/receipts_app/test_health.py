"""Ledger-derived health (docs/UPSTREAM.md#health) with this product's resolved statuses."""

from __future__ import annotations

import pytest

from opensquilla_site.timeutil import now_ms
from receipts_app import ledger
from receipts_app.audit import Actor
from receipts_app.health import health_by_agent, memory_health
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import acknowledge_receipt
from tests.factories import make_receipt

pytestmark = pytest.mark.django_db

DAY_MS = 24 * 3_600_000
MAIN = "agent:main:webchat:h"
OPS = "agent:ops:cron:h"


def test_an_empty_ledger_is_ok_and_healthy():
    health = memory_health("main")
    assert health["memorySafety"]["status"] == "ok"
    assert health["semanticMemory"] == {
        "status": "healthy",
        "repairBacklogCount": 0,
        "oldestRepairCreatedAt": None,
        "filter": {"agent": "main", "status": ["repair_pending", "distill_failed", "flush_failed"]},
    }
    assert health["terminalRepairs"]["count"] == 0


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ("checkpoint_failed", "disk full"),
        ("checkpoint_requeued", "disk full"),  # being retried is not yet resolved
        ("receipt_orphaned", None),
        ("hash_mismatch", None),
        ("flush_appended", "content hash mismatch on reread"),
        ("repair_done", "hash_mismatch detected"),
    ],
)
def test_unresolved_safety_failures_make_memory_safety_error(status, reason):
    row = make_receipt(session_key=MAIN, status=status, reason=reason)
    safety = memory_health("main")["memorySafety"]
    assert safety["status"] == "error"
    assert safety["sampleReceiptIds"] == [row.receipt_id]


@pytest.mark.parametrize(
    "status", ["checkpoint_recovered", "checkpoint_superseded", "acknowledged"]
)
def test_resolved_statuses_never_make_safety_error(status):
    make_receipt(session_key=MAIN, status=status, reason="hash mismatch in the old file")
    assert memory_health("main")["memorySafety"]["status"] == "ok"


def test_acknowledging_the_failure_turns_safety_back_to_ok():
    row = make_receipt(session_key=MAIN, status="checkpoint_failed", reason="disk full")
    assert memory_health("main")["memorySafety"]["status"] == "error"
    acknowledge_receipt(
        receipt_id=row.receipt_id, actor=Actor("ann", "console"), reason="disk replaced"
    )
    assert memory_health("main")["memorySafety"]["status"] == "ok"


def test_health_is_scoped_to_the_agent_prefix():
    make_receipt(session_key=OPS, status="checkpoint_failed")
    make_receipt(session_key=OPS, scope="repair", status="repair_pending")
    assert memory_health("main")["memorySafety"]["status"] == "ok"
    assert memory_health("main")["semanticMemory"]["status"] == "healthy"
    assert memory_health("ops")["memorySafety"]["status"] == "error"
    assert memory_health(None)["memorySafety"]["status"] == "error"


def _recent_flushes(count: int = 1000, tag: str = "recent") -> None:
    ledger.bulk_upsert_memory_durable_receipts(
        [
            MemoryDurableReceipt(
                session_key=MAIN,
                session_id="s",
                scope="flush",
                status="flush_appended",
                idempotency_key=f"{tag}:{i}",
            )
            for i in range(count)
        ]
    )


def _old_mismatch_behind_a_full_window() -> None:
    """A hash-mismatch row a day old, then 1,000 newer rows of the same agent."""
    make_receipt(
        session_key=MAIN,
        status="flush_appended",
        reason="hash mismatch on reread",
        created_at=now_ms() - DAY_MS,
    )
    _recent_flushes()


def test_the_hash_mismatch_heuristic_reads_only_the_thousand_most_recent_rows():
    _old_mismatch_behind_a_full_window()
    safety = memory_health("main")["memorySafety"]
    assert (safety["status"], safety["rowsChecked"], safety["hashMismatchCount"]) == ("ok", 1000, 0)


def test_the_window_is_the_agents_own_prefix_and_leaves_its_subagents_out():
    """Upstream reads the newest rows under ``agent:<id>:``; a subagent's rows share the
    agent_id column but not that prefix, so they neither count nor take a place in the
    window."""
    make_receipt(
        session_key="subagent:agent:main:subagent:r1",
        status="flush_appended",
        reason="hash mismatch on reread",
    )
    make_receipt(session_key=MAIN, status="flush_appended", reason="hash mismatch on reread")
    make_receipt(session_key=MAIN, status="flush_appended")
    safety = memory_health("main")["memorySafety"]
    assert (safety["rowsChecked"], safety["hashMismatchCount"]) == (2, 1)
    assert memory_health(None)["memorySafety"]["rowsChecked"] == 3


def test_a_failed_checkpoint_does_not_age_out_of_memory_safety():
    # Upstream forgets it after 1000 newer rows; here it stays at risk until it is resolved.
    old = make_receipt(session_key=MAIN, status="checkpoint_failed", created_at=now_ms() - DAY_MS)
    _recent_flushes()
    safety = memory_health("main")["memorySafety"]
    assert (safety["status"], safety["errorCount"]) == ("error", 1)
    assert safety["sampleReceiptIds"] == [old.receipt_id]


def test_each_count_comes_with_the_filter_that_lists_it():
    make_receipt(session_key=MAIN, status="checkpoint_requeued")
    make_receipt(session_key=MAIN, scope="repair", status="flush_failed")
    make_receipt(session_key=MAIN, scope="repair", status="repair_abandoned")
    health = memory_health("main")
    assert health["memorySafety"]["filter"] == {
        "agent": "main",
        "status": [
            "checkpoint_failed",
            "checkpoint_requeued",
            "receipt_orphaned",
            "hash_mismatch",
            "checkpoint_missing",
        ],
    }
    assert health["semanticMemory"]["filter"] == {
        "agent": "main",
        "status": ["repair_pending", "distill_failed", "flush_failed"],
    }
    assert health["terminalRepairs"] == {
        "count": 1,
        "filter": {"agent": "main", "status": ["repair_failed", "repair_abandoned"]},
    }


def test_a_small_fresh_backlog_is_degraded():
    for _ in range(3):
        make_receipt(session_key=MAIN, scope="repair", status="repair_pending")
    make_receipt(session_key=MAIN, scope="repair", status="flush_failed")
    make_receipt(session_key=MAIN, scope="repair", status="repair_running")  # claimed, not queued
    semantic = memory_health("main")["semanticMemory"]
    assert (semantic["status"], semantic["repairBacklogCount"]) == ("degraded", 4)


def test_a_backlog_over_ten_rows_is_a_warning():
    for _ in range(11):
        make_receipt(session_key=MAIN, scope="repair", status="repair_pending")
    assert memory_health("main")["semanticMemory"]["status"] == "warning"


def test_a_backlog_older_than_a_day_is_a_warning():
    old = make_receipt(
        session_key=MAIN, scope="repair", status="repair_pending", created_at=now_ms() - 2 * DAY_MS
    )
    semantic = memory_health("main")["semanticMemory"]
    assert semantic["status"] == "warning"
    assert semantic["oldestRepairCreatedAt"] == old.created_at


def test_health_by_agent_lists_every_agent_in_the_ledger():
    make_receipt(session_key=MAIN, status="checkpoint_saved")
    make_receipt(session_key=OPS, status="checkpoint_failed")
    make_receipt(session_key="legacy-key-without-agent", status="checkpoint_failed")
    rows = health_by_agent()
    assert [(r["agentId"], r["memorySafety"]["status"]) for r in rows] == [
        ("main", "ok"),
        ("ops", "error"),
    ]


# --- the overview's gated window: same findings, without the count ---------------------------


def _without_count(item: dict) -> dict:
    safety = {k: v for k, v in item["memorySafety"].items() if k != "rowsChecked"}
    return {**item, "memorySafety": safety}


def _both_ways() -> tuple[list[dict], list[dict]]:
    now = now_ms()
    counted = health_by_agent(now_ms=now)
    gated = health_by_agent(now_ms=now, count_checked=False)
    return counted, gated


def test_without_the_count_health_finds_a_mismatch_in_the_window_as_before():
    row = make_receipt(session_key=MAIN, status="repair_done", reason="Hash mismatch on reread")
    make_receipt(session_key=OPS, status="flush_appended")
    counted, gated = _both_ways()
    assert [_without_count(item) for item in counted] == [_without_count(i) for i in gated]
    main = next(item for item in gated if item["agentId"] == "main")["memorySafety"]
    assert (main["status"], main["hashMismatchCount"], main["rowsChecked"]) == ("error", 1, None)
    assert main["sampleReceiptIds"] == [row.receipt_id]


def test_without_the_count_a_mismatch_older_than_the_window_still_does_not_count():
    _old_mismatch_behind_a_full_window()
    counted, gated = _both_ways()
    assert [_without_count(item) for item in counted] == [_without_count(i) for i in gated]
    assert gated[0]["memorySafety"]["status"] == "ok"


def test_without_the_count_a_clean_ledger_is_ok_and_says_it_counted_nothing():
    make_receipt(session_key=MAIN, status="flush_appended")
    make_receipt(session_key=OPS, status="repair_done", reason="retried after a timeout")
    counted, gated = _both_ways()
    assert [_without_count(item) for item in counted] == [_without_count(i) for i in gated]
    assert {i["memorySafety"]["status"] for i in gated} == {"ok"}
    assert {i["memorySafety"]["rowsChecked"] for i in gated} == {None}
    assert {i["memorySafety"]["rowsChecked"] for i in counted} == {1}


def test_the_mismatch_index_repeats_the_heuristic_term_for_term():
    """The partial index that lets the overview skip clean agents' windows is usable only while
    health's query spells its WHERE exactly as the migration froze it."""
    import importlib

    from receipts_app.health import hash_mismatch_predicate

    # The latest migration that builds the index (0023: retired_upstream rows left out).
    migration = importlib.import_module("receipts_app.migrations.0023_hash_mismatch_skips_retired")
    assert migration.HASH_MISMATCH_WHERE == hash_mismatch_predicate("%")


def test_the_mismatch_index_in_the_database_leaves_retired_rows_out():
    """Migration 0023 built the index again with the predicate that skips ``retired_upstream``
    rows: a retired row naming a hash mismatch is not in it (the match probe never flags it)."""
    from django.db import connection

    from receipts_app.health import match_probe

    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'idx_mdr_hash_mismatch'")
        else:
            cur.execute("SELECT sql FROM sqlite_master WHERE name = 'idx_mdr_hash_mismatch'")
        (definition,) = cur.fetchone()
    assert "retired_upstream" in definition
    make_receipt(status="retired_upstream", scope="flush", reason="archive hash mismatch")
    sql, params = match_probe()
    with connection.cursor() as cur:
        cur.execute(sql, params)
        assert cur.fetchall() == []


def test_the_planner_can_answer_the_match_probe_from_the_mismatch_index():
    from django.db import connection

    from receipts_app.health import match_probe

    sql, params = match_probe()
    with connection.cursor() as cur:
        if connection.vendor == "postgresql":
            cur.execute("SET LOCAL enable_seqscan = off")
            cur.execute("SET LOCAL enable_bitmapscan = off")
            cur.execute(f"EXPLAIN {sql}", params)
            plan = "\n".join(r[0] for r in cur.fetchall())
            assert "idx_mdr_hash_mismatch" in plan, plan
        else:
            # The probe names the index (INDEXED BY), which fails to prepare ("no query
            # solution") unless the index is usable for it.
            assert "INDEXED BY idx_mdr_hash_mismatch" in sql
            cur.execute(sql, params)
            assert cur.fetchall() == []


def test_the_overview_reads_no_window_rows_when_nothing_matches():
    """The gate must stop the scan itself, not only filter its rows out: a window that walked
    every row of the agent and failed each would find the same nothing, slower than no gate."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    _recent_flushes(3000, tag="clean")
    if connection.vendor == "sqlite":
        steps = {"n": 0}

        def count_steps() -> int:
            steps["n"] += 1
            return 0

        def measured(**kwargs) -> int:
            steps["n"] = 0
            connection.connection.set_progress_handler(count_steps, 100)
            try:
                health_by_agent(**kwargs)
            finally:
                connection.connection.set_progress_handler(None, 0)
            return steps["n"]

        # Counted: 1,000 window rows are read; gated: a probe of an empty partial index.
        assert measured(count_checked=False) * 10 < measured(count_checked=True)
    else:
        with CaptureQueriesContext(connection) as captured:
            health_by_agent(count_checked=False)
        # Nothing matches: no window is in any statement.
        assert not [q["sql"] for q in captured.captured_queries if "w0 AS" in q["sql"]]
