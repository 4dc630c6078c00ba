"""The repair worker: accounting, claims, archive repair, sidecars, legacy import, agents, summaries."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.core.management import call_command

from receipts_app import flush_runtime, ledger, repair
from receipts_app.flush import FlushReceipt
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from sessions_app.models import CompactedTranscriptEntry, CompactionSummary
from sessions_app.services import delete_session
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db

ARCHIVE_BODY = "# Raw flush (preimage)\n\nuser: we deploy on fridays\nassistant: noted\n"


class CandidateProvider:
    """A flush model that returns one valid candidate: the repair succeeds."""

    async def complete(self, messages: Any, max_tokens: int) -> Any:
        payload = {
            "slug": "deploy-habits",
            "candidates": [
                {
                    "kind": "fact",
                    "render_text": "The team deploys on Fridays.",
                    "source_message": 1,
                    "source_date": "2026-05-01",
                    "confidence": 0.9,
                }
            ],
        }
        return SimpleNamespace(content=json.dumps(payload))


@pytest.fixture
def workspaces(tmp_path, settings) -> Path:
    """Per-agent memory workspaces; returns the parent directory."""
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(tmp_path / "ws" / "{agent}")
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    settings.OPENSQUILLA_FLUSH_PROVIDER = "none"
    settings.OPENSQUILLA_REPAIR_MAX_ITEMS_PER_TICK = 5
    return tmp_path / "ws"


@pytest.fixture
def good_provider(monkeypatch):
    monkeypatch.setattr(flush_runtime, "provider_selector", lambda agent: CandidateProvider())


def write_archive(
    root: Path,
    name: str = "2026-05-01-agent-main-x-preimage-0123456789abcdef.md",
    body: str = ARCHIVE_BODY,
) -> str:
    path = root / "memory" / ".raw_fallbacks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body, encoding="utf-8")
    return f"memory/.raw_fallbacks/{name}"


def repair_row(path: str | None, *, agent: str = "main", **fields: Any) -> MemoryDurableReceipt:
    values: dict[str, Any] = {
        "session_key": f"agent:{agent}:webchat:s1",
        "scope": "repair",
        "status": "repair_pending",
        "reason": "ok_archive_only",
        "target_path": path,
        "attempt_count": 1,
    }
    values.update(fields)
    return make_receipt(**values)


def reload(row: MemoryDurableReceipt) -> MemoryDurableReceipt:
    return ledger.get_memory_durable_receipt(row.receipt_id)


# --- attempt accounting -----------------------------------------------------------------------


def test_backoff_table_matches_the_pinned_example():
    row = repair_row("memory/.raw_fallbacks/a.md", attempt_count=0, status="repair_pending")
    seen = []
    for now in (1000, 2000, 3000, 4000):
        before = reload(row)
        after = repair.mark_repair_attempt_failed(before, "OSError", now, attempt_source=before)
        seen.append((after.attempt_count, after.status, after.next_retry_at_ms))
    assert seen == [
        (1, "repair_pending", 301000),
        (2, "repair_pending", 1802000),
        (3, "repair_pending", 21603000),
        (4, "repair_abandoned", None),
    ]
    assert reload(row).reason == "OSError"


def test_flush_created_row_gets_four_real_attempts():
    # attempt_count 1 + pending + never retried is the flush's own row: not yet attempted.
    row = repair_row("memory/.raw_fallbacks/a.md", attempt_count=1, next_retry_at_ms=None)
    attempts = []
    for now in (10, 20, 30, 40):
        before = reload(row)
        after = repair.mark_repair_attempt_failed(before, None, now, attempt_source=before)
        attempts.append((after.attempt_count, after.status))
    assert attempts == [
        (1, "repair_pending"),
        (2, "repair_pending"),
        (3, "repair_pending"),
        (4, "repair_abandoned"),
    ]
    assert reload(row).reason == "repair_failed"


def test_special_case_needs_all_three_conditions():
    retried = repair_row("memory/.raw_fallbacks/a.md", attempt_count=1, next_retry_at_ms=5)
    after = repair.mark_repair_attempt_failed(retried, "x", 100, attempt_source=retried)
    assert (after.attempt_count, after.next_retry_at_ms) == (2, 100 + 1_800_000)


def test_done_keeps_reason_and_attempts():
    row = repair_row(
        "memory/.raw_fallbacks/a.md", attempt_count=2, reason="OSError", next_retry_at_ms=7
    )
    done = repair.mark_repair_attempt_done(row)
    assert (done.status, done.reason, done.attempt_count, done.next_retry_at_ms) == (
        "repair_done",
        "OSError",
        2,
        None,
    )


def test_stale_claims_return_to_the_queue():
    stale = repair_row("memory/.raw_fallbacks/a.md", status="repair_running", attempt_count=2)
    fresh = repair_row("memory/.raw_fallbacks/b.md", status="repair_running")
    now = 10_000_000
    ledger.update_memory_durable_receipt(stale.receipt_id, updated_at=now - 30 * 60 * 1000)
    ledger.update_memory_durable_receipt(fresh.receipt_id, updated_at=now - 29 * 60 * 1000)

    assert repair.recover_stale_repair_claims(now) == 1

    recovered = reload(stale)
    assert (recovered.status, recovered.reason, recovered.next_retry_at_ms) == (
        "repair_pending",
        "stale_repair_claim",
        now + 300_000,
    )
    assert recovered.attempt_count == 2
    assert reload(fresh).status == "repair_running"
    assert ReceiptEvent.objects.filter(
        receipt_id=stale.receipt_id, action="stale_recovery"
    ).exists()


# --- one repair ----------------------------------------------------------------------------------


def test_repaired_archive_marks_done_and_writes_sidecar(workspaces, good_provider):
    root = workspaces / "main"
    path = write_archive(root)
    row = repair_row(path)

    results = repair.run_memory_repair_once("main", limit=5)

    assert [(r["receiptId"], r["status"]) for r in results] == [(row.receipt_id, "repaired")]
    assert reload(row).status == "repair_done"
    sidecar = json.loads(
        (root / "memory/.raw_fallbacks/.repair_receipts" / (Path(path).name + ".json")).read_text()
    )
    assert sidecar["status"] == "repaired"
    assert sidecar["receipt"]["mode"] == "llm"
    note = root / sidecar["receipt"]["flushed_paths"][0]
    assert "The team deploys on Fridays." in note.read_text(encoding="utf-8")
    # The repair flush's raw-fallback key has no session: it writes no ledger rows itself.
    assert MemoryDurableReceipt.objects.count() == 1
    events = ReceiptEvent.objects.filter(receipt_id=row.receipt_id)
    assert {e.surface for e in events} == {"worker"}
    assert [e.to_status for e in events] == ["repair_running", "repair_done"]


def test_degraded_repair_backs_off_without_minting_a_new_archive(workspaces):
    root = workspaces / "main"
    path = write_archive(root)
    row = repair_row(path)

    [result] = repair.run_memory_repair_once("main", limit=5)

    assert result["status"] == "failed_retryable"
    after = reload(row)
    assert (after.status, after.reason, after.attempt_count) == (
        "repair_pending",
        "repair_failed",
        1,
    )
    assert after.next_retry_at_ms is not None
    archives = sorted(p.name for p in (root / "memory/.raw_fallbacks").glob("*.md"))
    assert archives == [Path(path).name]
    sidecar = json.loads(
        (root / "memory/.raw_fallbacks/.repair_receipts" / (Path(path).name + ".json")).read_text()
    )
    assert sidecar["receipt"]["flushed_paths"] == [path]
    # A later tick must not import anything new for this archive.
    assert repair.import_legacy_raw_fallback_receipts("main", root) == 0


def test_empty_archive_is_a_failed_attempt(workspaces, good_provider):
    root = workspaces / "main"
    path = write_archive(root, body="# Raw flush (preimage)\n\n")
    row = repair_row(path)

    [result] = repair.run_memory_repair_once("main", limit=5)

    assert (result["status"], result["reason"]) == ("failed_retryable", "empty_raw_excerpt")
    assert (reload(row).status, reload(row).reason) == ("repair_pending", "empty_raw_excerpt")
    sidecar = repair.sidecar_path(root / path)
    assert json.loads(sidecar.read_text())["status"] == "failed_retryable"


def test_missing_archive_records_the_error_class(workspaces, good_provider):
    row = repair_row("memory/.raw_fallbacks/gone.md")
    (workspaces / "main").mkdir(parents=True)
    [result] = repair.run_memory_repair_once("main", limit=5)
    assert result["reason"] == "FileNotFoundError"
    assert reload(row).reason == "FileNotFoundError"


def test_crash_inside_the_flush_never_leaves_the_claim(workspaces):
    root = workspaces / "main"
    row = repair_row(write_archive(root))

    class Exploding:
        async def execute(self, *args: Any, **kwargs: Any) -> FlushReceipt:
            raise RuntimeError("boom")

    results = repair.run_memory_repair_once("main", limit=5, flush_service=Exploding())

    assert results[0]["reason"] == "RuntimeError"
    assert reload(row).status == "repair_pending"


@pytest.mark.parametrize(
    "fields",
    [
        {"target_path": None, "source_path": "session:agent:main:webchat:s1:flush:1-2"},
        {"target_path": "memory/.raw_fallbacks/../../secrets.md"},
        {"target_path": "memory/.raw_fallbacks/nested/a.md"},
    ],
)
def test_unsupported_sources_are_skipped_without_a_claim(workspaces, fields):
    (workspaces / "main").mkdir(parents=True)
    row = repair_row(**{"path": None, **fields})

    [result] = repair.run_memory_repair_once("main", limit=5)

    assert (result["status"], result["reason"]) == ("skipped", "unsupported_repair_source")
    assert reload(row).status == "repair_pending"
    assert not ReceiptEvent.objects.filter(receipt_id=row.receipt_id, action="claim").exists()


def test_a_row_claimed_elsewhere_is_left_alone(workspaces, good_provider):
    root = workspaces / "main"
    row = repair_row(write_archive(root))
    snapshot = reload(row)
    assert ledger.claim_memory_repair_receipt(row.receipt_id, now_ms=snapshot.updated_at)

    result = repair.repair_durable_receipt_source(
        snapshot, memory_root=root, flush_service=repair.build_repair_flush_service()
    )

    assert (result["status"], result["reason"]) == ("skipped", "repair_already_claimed")
    assert reload(row).status == "repair_running"
    assert not repair.sidecar_path(root / row.target_path).exists()
    # And the pass leaves it out of its results entirely.
    assert repair.run_memory_repair_once("main", limit=5) == []


def test_rows_not_yet_due_wait(workspaces, good_provider):
    root = workspaces / "main"
    row = repair_row(write_archive(root), next_retry_at_ms=5_000)
    assert repair.run_memory_repair_once("main", limit=5, now_ms=4_999) == []
    assert reload(row).status == "repair_pending"


def test_agent_prefix_is_literal(workspaces, good_provider):
    # With LIKE, "a_b" would also match agent "axb".
    mine = repair_row(write_archive(workspaces / "a_b"), agent="a_b")
    other = repair_row(write_archive(workspaces / "axb"), agent="axb")

    results = repair.run_memory_repair_once("a_b", limit=5)

    assert [r["receiptId"] for r in results] == [mine.receipt_id]
    assert reload(other).status == "repair_pending"


def test_no_memory_root_reports_and_leaves_the_row(settings):
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    row = repair_row("memory/.raw_fallbacks/a.md")
    [result] = repair.run_memory_repair_once("main", limit=5)
    assert result["reason"] == "memory_root_unavailable"
    assert reload(row).status == "repair_pending"


def test_path_filter_is_validated(workspaces):
    with pytest.raises(ValueError, match="raw_fallbacks"):
        repair.run_memory_repair_once("main", limit=1, path="../etc/passwd")


# --- legacy import -------------------------------------------------------------------------------


def test_legacy_import_queues_unreferenced_archives_once(workspaces):
    root = workspaces / "ops"
    plain = write_archive(
        root,
        "2026-01-01-x-no_provider-aaaaaaaaaaaaaaaa.md",
        "# Raw flush (no_provider)\n\nuser: hi\n",
    )
    headerless = write_archive(root, "2026-01-02-y-bbbbbbbbbbbbbbbb.md", "user: hi\n")
    done = write_archive(root, "2026-01-03-z-cccccccccccccccc.md")
    repair.write_sidecar(root / done, status="repaired")
    referenced = write_archive(root, "2026-01-04-w-dddddddddddddddd.md")
    make_receipt(
        session_key="agent:ops:webchat:s9",
        scope="preimage",
        status="preimage_saved",
        target_path=referenced,
    )
    elsewhere = write_archive(root, "2026-01-05-v-eeeeeeeeeeeeeeee.md")
    make_receipt(
        session_key="agent:other:webchat:s9",
        scope="preimage",
        status="preimage_saved",
        target_path=elsewhere,
    )
    mtime = 1_700_000_000
    os.utime(root / plain, (mtime, mtime))

    assert repair.import_legacy_raw_fallback_receipts("OPS", root) == 3
    assert repair.import_legacy_raw_fallback_receipts("ops", root) == 0

    rows = {
        r.source_path: r
        for r in MemoryDurableReceipt.objects.filter(
            session_key="agent:ops:memory-repair:legacy-raw"
        )
    }
    assert set(rows) == {plain, headerless, elsewhere}
    first = rows[plain]
    assert (first.session_id, first.scope, first.status, first.attempt_count) == (
        "legacy-raw:ops",
        "repair",
        "repair_pending",
        0,
    )
    assert first.idempotency_key == f"repair-legacy-raw:ops:{plain}"
    assert first.reason == "no_provider"
    assert first.created_at == mtime * 1000
    assert rows[headerless].reason == "legacy_raw_fallback"


def test_legacy_rows_are_repaired_by_the_tick(workspaces, good_provider):
    root = workspaces / "main"
    path = write_archive(root)

    summary = repair.run_repair_tick()

    row = MemoryDurableReceipt.objects.get(source_path=path)
    assert row.status == "repair_done"
    assert summary["counts"] == {"repaired": 1}


# --- ticks and single repairs --------------------------------------------------------------------


def test_tick_recovers_stale_claims_and_respects_the_budget(workspaces, settings, good_provider):
    settings.OPENSQUILLA_REPAIR_MAX_ITEMS_PER_TICK = 1
    root = workspaces / "ops"
    first = repair_row(write_archive(root, "a-aaaaaaaaaaaaaaaa.md"), agent="ops")
    second = repair_row(write_archive(root, "b-bbbbbbbbbbbbbbbb.md"), agent="ops")
    stuck = repair_row("memory/.raw_fallbacks/c.md", agent="ops", status="repair_running")
    ledger.update_memory_durable_receipt(stuck.receipt_id, updated_at=1)

    summary = repair.run_repair_tick()

    assert summary["recovered"] == 1
    assert "ops" in summary["agents"] and "main" in summary["agents"]
    assert len(summary["processed"]) == 1
    statuses = sorted(reload(r).status for r in (first, second))
    assert statuses == ["repair_done", "repair_pending"]
    assert reload(stuck).reason == "stale_repair_claim"


def test_repair_one_handles_missing_not_due_and_due_rows(workspaces, good_provider):
    root = workspaces / "main"
    assert repair.repair_one("nope")["reason"] == "receipt_missing"

    later = repair_row(write_archive(root, "l-aaaaaaaaaaaaaaaa.md"), next_retry_at_ms=2**62)
    assert repair.repair_one(later.receipt_id)["reason"] == "not_due"
    assert reload(later).status == "repair_pending"

    done = repair_row("memory/.raw_fallbacks/x.md", status="repair_done")
    assert repair.repair_one(done.receipt_id)["reason"] == "not_queued"

    due = repair_row(write_archive(root, "d-bbbbbbbbbbbbbbbb.md"))
    result = repair.repair_one(due.receipt_id)
    assert result["status"] == "repaired"
    assert reload(due).status == "repair_done"


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_repairs_claim_a_row_once(workspaces, good_provider):
    import threading

    from django.db import connection

    root = workspaces / "main"
    row = repair_row(write_archive(root))
    snapshot = reload(row)
    barrier = threading.Barrier(2)
    results: list[dict[str, Any]] = []

    def run() -> None:
        try:
            barrier.wait(timeout=10)
            results.append(
                repair.repair_durable_receipt_source(
                    snapshot, memory_root=root, flush_service=repair.build_repair_flush_service()
                )
            )
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert sorted((r["status"], r["reason"]) for r in results if r["status"] == "skipped") == [
        ("skipped", "repair_already_claimed")
    ]
    assert [r["status"] for r in results if r["status"] != "skipped"] == ["repaired"]
    assert reload(row).status == "repair_done"
    assert ReceiptEvent.objects.filter(receipt_id=row.receipt_id, action="claim").count() == 1


# --- which agents the tick scans; degraded compaction summaries ----------------------------

LEGACY = "memory/.raw_fallbacks/{}"


def _legacy_rows(agent: str) -> list[MemoryDurableReceipt]:
    return list(MemoryDurableReceipt.objects.filter(session_key__startswith=f"agent:{agent}:"))


def test_tick_imports_legacy_archives_of_a_configured_agent_without_rows(
    workspaces, good_provider, settings
):
    settings.OPENSQUILLA_AGENTS = ["Ops%"]
    write_archive(workspaces / "ops", "legacy.md")

    summary = repair.run_repair_tick()

    assert "ops" in summary["agents"]
    rows = _legacy_rows("ops")
    assert [(r.session_key, r.source_path, r.status) for r in rows] == [
        ("agent:ops:memory-repair:legacy-raw", LEGACY.format("legacy.md"), "repair_done")
    ]


def test_tick_finds_agents_from_sessions_and_workspace_directories(workspaces, good_provider):
    make_session("agent:research:webchat:s1")
    write_archive(workspaces / "research", "r.md")
    write_archive(workspaces / "nightly", "n.md")
    # A directory whose name is not a normalised agent id is not an agent.
    write_archive(workspaces / "Odd Name", "x.md")

    summary = repair.run_repair_tick()

    assert {"main", "nightly", "research"} <= set(summary["agents"])
    assert "Odd Name" not in summary["agents"]
    assert [r.status for r in _legacy_rows("research")] == ["repair_done"]
    assert [r.status for r in _legacy_rows("nightly")] == ["repair_done"]


def _degraded_summary(status: str = "degraded_forensic", *, entries: bool = True):
    summary = CompactionSummary.objects.create(
        session_id="session-17",
        session_key="agent:main:webchat:compacted",
        compaction_id="cmp-17",
        trigger_reason="preflight",
        flush_receipt_status=status,
        removed_count=2,
        covered_through_id=9,
    )
    if entries:
        for entry_id, role, text in ((3, "user", "we deploy on fridays"), (4, "assistant", "ok")):
            CompactedTranscriptEntry.objects.create(
                session_id="session-17",
                session_key=summary.session_key,
                compaction_id="cmp-17",
                original_entry_id=entry_id,
                message_id=f"m{entry_id}",
                role=role,
                content=text,
                created_at=1_700_000_000_000 + entry_id,
            )
    return summary


def test_tick_repairs_a_degraded_compaction_summary_from_its_preimage(
    workspaces, good_provider, monkeypatch
):
    summary = _degraded_summary()
    seen = []
    real = repair.repair_compaction_source

    def spy(summary, **kwargs):
        result = real(summary, **kwargs)
        seen.append(result)
        return result

    monkeypatch.setattr(repair, "repair_compaction_source", spy)

    tick = repair.run_repair_tick()

    summary.refresh_from_db()
    assert summary.flush_receipt_status == "repaired"
    assert [(p["sourceType"], p["status"]) for p in tick["processed"]] == [
        ("compaction_preimage", "repaired")
    ]
    assert seen[0]["entryIdRange"] == [3, 4]
    assert seen[0]["receipt"]["turn_id"].startswith("maintenance_")


def test_summary_without_preimage_is_marked_failed_retryable(workspaces, good_provider):
    summary = _degraded_summary(entries=False)

    tick = repair.run_repair_tick()

    summary.refresh_from_db()
    assert summary.flush_receipt_status == "failed_retryable"
    assert [(p["status"], p["reason"]) for p in tick["processed"]] == [
        ("failed_retryable", "missing_preimage")
    ]


def test_failed_summary_is_retried_only_when_selected(workspaces, good_provider, capsys):
    summary = _degraded_summary("failed_retryable")

    assert repair.run_repair_tick()["processed"] == []
    summary.refresh_from_db()
    assert summary.flush_receipt_status == "failed_retryable"

    call_command(
        "repair_once", "--session-key", summary.session_key, "--compaction-id", "cmp-17", "--json"
    )

    summary.refresh_from_db()
    assert summary.flush_receipt_status == "repaired"
    printed = json.loads(capsys.readouterr().out)
    assert [(p["sourceType"], p["status"]) for p in printed["processed"]] == [
        ("compaction_preimage", "repaired")
    ]


def test_agent_list_reads_distinct_agents_in_two_queries(workspaces, django_assert_num_queries):
    for index in range(30):
        make_session(f"agent:research:webchat:q{index}")
    make_receipt(session_key="agent:ops:webchat:s1", scope="repair", status="repair_pending")

    with django_assert_num_queries(2) as captured:
        agents = repair.repair_agent_ids()

    assert agents == ["main", "ops", "research"]
    # DISTINCT over agent_id alone: a default ordering column would return every session row.
    assert all("updated_at" not in q["sql"] for q in captured.captured_queries)


def test_deleting_a_session_removes_its_compactions_so_none_is_repaired(workspaces, good_provider):
    make_session("agent:main:webchat:compacted")
    _degraded_summary()

    assert delete_session("agent:main:webchat:compacted")

    assert CompactionSummary.objects.count() == 0
    assert CompactedTranscriptEntry.objects.count() == 0
    assert repair.run_repair_tick()["processed"] == []


# --- a memory workspace shared by every agent ----------------------------------------------


@pytest.fixture
def shared_workspace(tmp_path, settings) -> Path:
    """What ``make run`` writes: one workspace for every agent's memory and checkpoints."""
    root = tmp_path / "shared"
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(root)
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(root)
    settings.OPENSQUILLA_FLUSH_PROVIDER = "none"
    settings.OPENSQUILLA_REPAIR_MAX_ITEMS_PER_TICK = 5
    return root


SHARED_NAMES = {
    "main": "2026-05-01-agent-main-webchat-s1-preimage-1111111111111111.md",
    "ops": "2026-05-01-agent-ops-webchat-s1-no_provider-2222222222222222.md",
    "ops-team": "2026-05-01-agent-ops-team-webchat-s2-timeout-3333333333333333.md",
    "sub": "2026-05-01-subagent-agent-ops-team-task-s3-llm_error-4444444444444444.md",
    "stranger": "2026-05-01-unknown-preimage-5555555555555555.md",
}


def test_shared_workspace_archive_is_queued_once_under_the_agent_it_names(shared_workspace):
    make_session("agent:ops:webchat:s1")
    make_session("agent:ops-team:webchat:s2")
    paths = {who: write_archive(shared_workspace, name) for who, name in SHARED_NAMES.items()}
    # The flush of ops' session already queued its own repair of this archive.
    flush_row = repair_row(paths["ops"], agent="ops")

    for _ in range(2):  # a second tick finds nothing new
        repair.run_repair_tick()

    legacy = MemoryDurableReceipt.objects.filter(session_key__endswith=":memory-repair:legacy-raw")
    owners = sorted((r.source_path, r.agent_id) for r in legacy)
    assert owners == sorted(
        [
            (paths["main"], "main"),
            (paths["ops-team"], "ops-team"),  # not "ops", whose prefix it also starts with
            (paths["sub"], "ops-team"),
            (paths["stranger"], "main"),
        ]
    )
    referring = MemoryDurableReceipt.objects.filter(source_path=paths["ops"]) | (
        MemoryDurableReceipt.objects.filter(target_path=paths["ops"])
    )
    assert [r.receipt_id for r in referring] == [flush_row.receipt_id]


def test_per_agent_workspaces_keep_upstreams_rule(workspaces):
    # In an agent's own workspace an archive is that agent's, whatever its name says.
    write_archive(workspaces / "main", SHARED_NAMES["ops"])
    assert repair.import_legacy_raw_fallback_receipts("main", workspaces / "main") == 1
    assert [r.agent_id for r in MemoryDurableReceipt.objects.all()] == ["main"]


def test_check_counts_fix_removes_duplicate_legacy_repairs_with_an_event(shared_workspace, capsys):
    paths = {who: write_archive(shared_workspace, name) for who, name in SHARED_NAMES.items()}
    flush_row = repair_row(paths["ops"], agent="ops")

    def legacy(agent: str, path: str, status: str = "repair_pending") -> MemoryDurableReceipt:
        return make_receipt(
            session_key=f"agent:{agent}:memory-repair:legacy-raw",
            session_id=f"legacy-raw:{agent}",
            scope="repair",
            status=status,
            source_path=path,
            idempotency_key=f"repair-legacy-raw:{agent}:{path}",
            attempt_count=0,
        )

    # What the old import left: every agent's copy of every archive.
    copies_of_ops = [legacy(a, paths["ops"]) for a in ("main", "ops-team")]
    own = legacy("ops-team", paths["ops-team"])
    copies_of_team = [
        legacy("main", paths["ops-team"], "repair_failed"),
        legacy("ops", paths["ops-team"]),
    ]
    running = legacy("ops", paths["main"], "repair_running")
    kept_main = legacy("main", paths["main"])

    with pytest.raises(SystemExit):
        call_command("check_counts")
    assert "duplicate legacy repair" in capsys.readouterr().out
    call_command("check_counts", "--fix")

    left = set(MemoryDurableReceipt.objects.values_list("receipt_id", flat=True))
    gone = {r.receipt_id for r in [*copies_of_ops, *copies_of_team]}
    assert not (gone & left)
    assert {flush_row.receipt_id, own.receipt_id, running.receipt_id, kept_main.receipt_id} <= left
    events = ReceiptEvent.objects.filter(action="duplicate_removed")
    assert sorted(e.receipt_id for e in events) == sorted(gone)
    assert {(e.surface, e.actor) for e in events} == {("cli", "check_counts")}
    call_command("check_counts")  # exit 0: nothing left to fix
