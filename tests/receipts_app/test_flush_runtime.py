"""The product's flush wiring: the durable receipt writer and the rows a flush leaves behind."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from receipts_app import flush_runtime
from receipts_app.models import MemoryDurableReceipt
from sessions_app import services as session_services
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def memory_root(tmp_path, settings) -> Path:
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(tmp_path / "mem-{agent}")
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    settings.OPENSQUILLA_FLUSH_PROVIDER = "none"
    return tmp_path / "mem-main"


def rows_for(key: str) -> list[MemoryDurableReceipt]:
    return list(MemoryDurableReceipt.objects.filter(session_key=key).order_by("id"))


class CandidateProvider:
    """An LLM that answers with one valid candidate, like a well-behaved flush model."""

    def __init__(self, on_call: Any = None) -> None:
        self.calls = 0
        self.on_call = on_call

    async def complete(self, messages: Any, max_tokens: int) -> Any:
        self.calls += 1
        if self.on_call is not None:
            await self.on_call()
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


def test_degraded_flush_without_provider_writes_preimage_then_repair_row(memory_root):
    session = make_session(messages=2)
    key = session.session_key

    receipt = flush_runtime.flush_session(key)

    assert receipt.result_status == "ok_archive_only"
    preimage, repair = rows_for(key)
    assert (preimage.scope, preimage.status, preimage.reason) == (
        "preimage",
        "preimage_saved",
        "preimage",
    )
    assert (repair.scope, repair.status, repair.reason) == (
        "repair",
        "repair_pending",
        "ok_archive_only",
    )
    # Both point at the one archive on disk, and carry the live generation.
    assert preimage.target_path == repair.target_path
    assert repair.target_path.startswith("memory/.raw_fallbacks/")
    assert (memory_root / repair.target_path).is_file()
    assert {preimage.session_id, repair.session_id} == {session.session_id}
    assert repair.attempt_count == 1 and repair.next_retry_at_ms is None
    assert repair.content_hash and len(repair.content_hash) == 64


def test_flush_receipt_idempotency_key_format_and_replay(memory_root):
    session = make_session(messages=2)
    key = session.session_key

    receipt = flush_runtime.flush_session(key)
    repair = MemoryDurableReceipt.objects.get(session_key=key, scope="repair")

    expected = ":".join(
        [
            "flush-receipt",
            "repair",
            key,
            session.session_id,
            "flush:1-2",
            "repair_pending",
            "ok_archive_only",
            f"session:{key}:flush:1-2",
            repair.target_path,
            receipt.content_hash,
            "2",
            "1",
            "2",
        ]
    )
    assert repair.idempotency_key == expected
    assert repair.turn_id == "flush:1-2"
    assert repair.source_path == f"session:{key}:flush:1-2"

    # A redelivered flush task changes nothing: same keys, same rows.
    before = [(r.receipt_id, r.idempotency_key) for r in rows_for(key)]
    flush_runtime.flush_session(key)
    assert [(r.receipt_id, r.idempotency_key) for r in rows_for(key)] == before
    assert len(before) == 2


def test_strictly_safe_llm_flush_writes_a_flush_appended_row(memory_root, monkeypatch):
    provider = CandidateProvider()
    monkeypatch.setattr(flush_runtime, "provider_selector", lambda agent: provider)
    session = make_session(messages=2)

    receipt = flush_runtime.flush_session(session.session_key, turn_id="cmp_1")

    assert receipt.result_status == "ok_candidates_written"
    statuses = [(r.scope, r.status, r.reason) for r in rows_for(session.session_key)]
    assert statuses == [
        ("preimage", "preimage_saved", "preimage"),
        ("flush", "flush_appended", None),
    ]
    flush_row = rows_for(session.session_key)[-1]
    note = memory_root / flush_row.target_path
    assert "The team deploys on Fridays." in note.read_text(encoding="utf-8")
    assert flush_row.turn_id == "cmp_1"


def test_misconfigured_provider_still_archives_and_queues_repair(memory_root, settings):
    settings.OPENSQUILLA_FLUSH_PROVIDER = "openai"
    settings.OPENSQUILLA_FLUSH_BASE_URL = ""
    session = make_session(messages=2)

    receipt = flush_runtime.flush_session(session.session_key)

    assert receipt.result_status == "ok_archive_only"
    assert [r.status for r in rows_for(session.session_key)] == ["preimage_saved", "repair_pending"]


def test_unknown_session_raises_key_error(memory_root):
    with pytest.raises(KeyError, match="Session not found"):
        flush_runtime.flush_session("agent:main:webchat:nobody")


@pytest.mark.parametrize("has_checkpoint", [False, True])
def test_unset_workspace_records_archive_failed(settings, has_checkpoint):
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    settings.OPENSQUILLA_FLUSH_PROVIDER = "none"
    session = make_session(messages=2)
    key = session.session_key
    if has_checkpoint:
        make_receipt(
            session_key=key,
            session_id=session.session_id,
            scope="checkpoint",
            status="checkpoint_saved",
            source_path="memory/.checkpoints/x/through-2.jsonl",
            content_hash="a" * 64,
        )

    receipt = flush_runtime.flush_session(key)

    assert receipt.result_status == "archive_failed"
    failure = MemoryDurableReceipt.objects.get(session_key=key, reason="archive_failed")
    if has_checkpoint:
        assert (failure.scope, failure.status) == ("repair", "repair_failed")
    else:
        assert (failure.scope, failure.status) == ("checkpoint", "checkpoint_failed")
    assert failure.target_path is None
    assert failure.session_id == session.session_id


def test_reset_during_flush_leaves_no_outcome_row(memory_root, monkeypatch):
    session = make_session(messages=2)
    key = session.session_key

    async def reset_mid_flush() -> None:
        await sync_to_async(session_services.reset_session)(key)
        raise RuntimeError("provider fell over")

    monkeypatch.setattr(
        flush_runtime, "provider_selector", lambda agent: CandidateProvider(reset_mid_flush)
    )

    receipt = flush_runtime.flush_session(key)

    # The pre-image was recorded before the provider ran; the degraded outcome belongs to
    # a generation that no longer exists, so it is skipped rather than written.
    assert receipt.result_status in {"provider_failed_archived", "apply_failed_archived"}
    assert [(r.scope, r.session_id) for r in rows_for(key)] == [("preimage", session.session_id)]


# --- the writer's skip rules, called directly ------------------------------------------------


def _row(session_key: str, session_id: str | None) -> dict[str, Any]:
    return {
        "agent_id": "main",
        "session_key": session_key,
        "scope": "repair",
        "status": "repair_pending",
        "reason": "ok_archive_only",
        "target_path": "memory/.raw_fallbacks/x.md",
        "session_id": session_id,
        "turn_id": "flush:1-1",
        "source_path": f"session:{session_key}:flush:1-1",
        "content_hash": "",
    }


FAKE_RECEIPT = SimpleNamespace(
    result_status="ok_archive_only",
    input_message_count=1,
    first_included_message=1,
    last_included_message=1,
)


def test_writer_skips_without_captured_session_id():
    session = make_session()
    assert (
        flush_runtime.write_durable_flush_receipt(FAKE_RECEIPT, **_row(session.session_key, None))
        is None
    )
    assert rows_for(session.session_key) == []


def test_writer_skips_when_the_session_is_gone():
    session = make_session()
    session_services.delete_session(session.session_key)
    row = _row(session.session_key, session.session_id)
    assert flush_runtime.write_durable_flush_receipt(FAKE_RECEIPT, **row) is None
    assert rows_for(session.session_key) == []


def test_writer_skips_when_the_generation_changed():
    session = make_session()
    session_services.reset_session(session.session_key)
    row = _row(session.session_key, session.session_id)
    assert flush_runtime.write_durable_flush_receipt(FAKE_RECEIPT, **row) is None
    assert rows_for(session.session_key) == []


def test_writer_swallows_the_fence_when_a_reset_slips_in(monkeypatch):
    session = make_session()
    session_services.reset_session(session.session_key)
    # The pre-check saw the old generation (the reset landed right after it): the fenced
    # upsert refuses, and the writer logs instead of failing the flush.
    monkeypatch.setattr(flush_runtime, "_current_session_id", lambda key: session.session_id)
    row = _row(session.session_key, session.session_id)
    assert flush_runtime.write_durable_flush_receipt(FAKE_RECEIPT, **row) is None
    assert rows_for(session.session_key) == []


def test_writer_stores_empty_optionals_as_null_with_attempt_one():
    session = make_session()
    stored = flush_runtime.write_durable_flush_receipt(
        FAKE_RECEIPT, **_row(session.session_key, session.session_id)
    )
    assert stored is not None
    assert stored.content_hash is None
    assert stored.attempt_count == 1
    assert stored.idempotency_key.endswith(
        ":repair_pending:ok_archive_only:"
        f"session:{session.session_key}:flush:1-1:memory/.raw_fallbacks/x.md::1:1:1"
    )


def test_workspace_template_substitutes_the_normalised_agent(settings, tmp_path):
    settings.OPENSQUILLA_MEMORY_WORKSPACE = str(tmp_path / "ws" / "{agent}")
    assert flush_runtime.memory_workspace_for_agent("My Bot") == tmp_path / "ws" / "my-bot"
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "cp")
    assert flush_runtime.memory_workspace_for_agent("ops") == tmp_path / "cp"
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = None
    assert flush_runtime.memory_workspace_for_agent("ops") is None
