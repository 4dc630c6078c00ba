"""SessionFlushService: every result_status, its ledger rows, ordering and guards (docs/UPSTREAM.md#flush).

The "ledger" here is an in-memory list fed by receipt_writer, so none of these tests need a
database; the DB-backed writer is tested with the ledger itself.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from receipts_app.flush import (
    FlushReceipt,
    Message,
    SessionFlushService,
    ToolCall,
    ToolResult,
    flush_receipt_allows_destructive_compaction,
    flush_receipt_is_successful_flush,
)
from receipts_app.flush.calls import make_flush_read_only_handler
from receipts_app.flush.memory_save import (
    MemorySaveHandler,
    MemorySaveToolRegistry,
    markdown_chunks,
)
from receipts_app.flush.safety import ledger_row_fields
from receipts_app.flush.types import ProviderCompletionError, ToolContext, current_tool_context

KEY = "agent:main:webchat:abc"
REGISTRY = SimpleNamespace(to_tool_definitions=lambda: [SimpleNamespace(name="memory_save")])


def _answer(*candidates: dict[str, Any], slug: str = "trip", **extra: Any) -> str:
    return json.dumps({"slug": slug, "candidates": list(candidates), **extra})


def _fact(text: str = "Alice lives in Paris", **extra: Any) -> dict[str, Any]:
    return {
        "kind": "fact",
        "render_text": text,
        "source_message": 1,
        "source_date": "2026-05-29",
        "confidence": 0.9,
        **extra,
    }


class ScriptedProvider:
    """Answers ``complete`` calls from a script; an Exception entry is raised instead."""

    def __init__(self, *answers: str | BaseException, events: list[str] | None = None) -> None:
        self.answers = list(answers)
        self.prompts: list[str] = []
        self.events = events

    async def complete(self, *, messages: list[Message], max_tokens: int) -> SimpleNamespace:
        assert max_tokens == 3072
        self.prompts.append(messages[0].content)
        if self.events is not None:
            self.events.append("provider")
        answer = self.answers.pop(0)
        if isinstance(answer, BaseException):
            raise answer
        return SimpleNamespace(content=answer)


class Harness:
    """A service wired to a temp workspace, a real memory_save tool and a list ledger."""

    def __init__(self, workspace: Path | None, provider: Any = None, **service_kwargs: Any):
        self.workspace = workspace
        self.rows: list[dict[str, Any]] = []
        self.receipts_written: list[FlushReceipt] = []
        self.events: list[str] = []
        self.tool_calls: list[ToolCall] = []
        real_tool = MemorySaveHandler(lambda _agent: self.workspace)

        async def tool_handler(call: ToolCall) -> ToolResult:
            self.events.append("memory_save")
            self.tool_calls.append(call)
            return await real_tool(call)

        async def receipt_writer(receipt: FlushReceipt, **row: Any) -> None:
            self.events.append(f"ledger:{row['scope']}")
            self.rows.append(row)
            self.receipts_written.append(receipt)

        def archive_writer(workspace: Path, **kwargs: Any) -> Any:
            from receipts_app.flush import write_raw_fallback_archive

            self.events.append(f"archive:{kwargs['reason']}")
            return write_raw_fallback_archive(workspace, **kwargs)

        kwargs: dict[str, Any] = {
            "provider_selector": lambda _agent: provider,
            "tool_registry": MemorySaveToolRegistry(),
            "tool_handler": tool_handler,
            "receipt_writer": receipt_writer,
            "archive_workspace_resolver": lambda _agent: self.workspace,
            "archive_writer": archive_writer,
        }
        kwargs.update(service_kwargs)
        self.service = SessionFlushService(**kwargs)

    def scopes(self) -> list[tuple[str, str, str | None]]:
        return [(r["scope"], r["status"], r["reason"]) for r in self.rows]


def _transcript(n: int = 2) -> list[Message]:
    roles = ("user", "assistant")
    return [Message(role=roles[i % 2], content=f"message {i + 1}") for i in range(n)]


# --- result statuses and their ledger rows ---------------------------------------------------


async def test_empty_transcript_is_skipped_without_rows(tmp_path: Path) -> None:
    h = Harness(tmp_path, ScriptedProvider())

    receipt = await h.service.execute([], KEY)

    assert (receipt.mode, receipt.result_status) == ("skipped", "skipped")
    assert receipt.turn_id == "flush:0-0"
    assert receipt.content_hash is None
    assert h.rows == []


async def test_llm_write_that_is_strictly_safe_records_preimage_then_flush(tmp_path: Path) -> None:
    provider = ScriptedProvider(_answer(_fact(), _fact("Alice likes tea")))
    h = Harness(tmp_path, provider)

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "ok_candidates_written"
    assert (receipt.integrity_status, receipt.indexed_chunk_count) == ("ok", 2)
    assert flush_receipt_allows_destructive_compaction(receipt)
    assert h.scopes() == [
        ("preimage", "preimage_saved", "preimage"),
        ("flush", "flush_appended", None),
    ]
    note = receipt.flushed_paths[0]
    assert note.startswith("memory/") and note.endswith("-trip.md")
    assert h.rows[1]["target_path"] == note
    saved = (tmp_path / note).read_text(encoding="utf-8")
    assert "- Alice lives in Paris" in saved and "- Alice likes tea" in saved
    assert receipt.content_hash == hashlib.sha256(saved.rstrip("\n").encode()).hexdigest()
    assert h.rows[1]["content_hash"] == receipt.content_hash
    assert h.rows[0]["target_path"].startswith("memory/.raw_fallbacks/")


async def test_preimage_is_archived_and_recorded_before_the_provider_runs(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.service._provider_selector = lambda _agent: ScriptedProvider(
        _answer(_fact()), events=h.events
    )

    await h.service.execute(_transcript(), KEY)

    assert h.events == [
        "archive:preimage",
        "ledger:preimage",
        "provider",
        "memory_save",
        "ledger:flush",
    ]


async def test_llm_write_that_is_not_strictly_safe_leaves_no_flush_row(tmp_path: Path) -> None:
    # One valid candidate plus one invalid one: saved, but coverage is a warning.
    provider = ScriptedProvider(_answer(_fact(), _fact(confidence=5)))
    h = Harness(tmp_path, provider)

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "ok_candidates_written"
    assert receipt.invalid_candidate_count == 1
    assert not flush_receipt_allows_destructive_compaction(receipt)
    assert h.scopes() == [("preimage", "preimage_saved", "preimage")]


async def test_noop_answer_writes_nothing_but_the_preimage(tmp_path: Path) -> None:
    h = Harness(tmp_path, ScriptedProvider(_answer(noop_reason="small talk")))

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "ok_noop_no_memory"
    assert receipt.content_hash is None
    assert h.tool_calls == []
    assert h.scopes() == [("preimage", "preimage_saved", "preimage")]
    assert flush_receipt_is_successful_flush(receipt)
    assert not flush_receipt_allows_destructive_compaction(receipt)


async def test_no_provider_reuses_the_preimage_archive(tmp_path: Path) -> None:
    h = Harness(tmp_path, provider=None)

    receipt = await h.service.execute(_transcript(), KEY)

    assert (receipt.mode, receipt.raw_reason, receipt.result_status) == (
        "raw",
        "no_provider",
        "ok_archive_only",
    )
    assert h.scopes() == [
        ("preimage", "preimage_saved", "preimage"),
        ("repair", "repair_pending", "ok_archive_only"),
    ]
    assert h.rows[0]["target_path"] == h.rows[1]["target_path"] == receipt.flushed_paths[0]
    assert h.events.count("archive:preimage") == 1
    assert len(list((tmp_path / "memory/.raw_fallbacks").iterdir())) == 1


async def test_registry_without_memory_save_is_no_tools(tmp_path: Path) -> None:
    registry = SimpleNamespace(to_tool_definitions=lambda: [{"name": "web_search"}])
    h = Harness(tmp_path, ScriptedProvider(), tool_registry=registry)

    receipt = await h.service.execute(_transcript(), KEY)

    assert (receipt.raw_reason, receipt.result_status) == ("no_tools", "ok_archive_only")
    assert h.scopes()[-1] == ("repair", "repair_pending", "ok_archive_only")


async def test_without_a_preimage_the_fallback_writes_its_own_archive(tmp_path: Path) -> None:
    h = Harness(tmp_path, provider=None)

    receipt = await h.service.execute(_transcript(), KEY, raw_capture_policy="off")

    assert "-no_provider-" in receipt.flushed_paths[0]
    assert h.scopes() == [("repair", "repair_pending", "ok_archive_only")]
    text = (tmp_path / receipt.flushed_paths[0]).read_text(encoding="utf-8")
    assert text == "# Raw flush (no_provider)\n\nuser: message 1\nassistant: message 2"


async def test_unparseable_answer_gets_exactly_one_repair_prompt(tmp_path: Path) -> None:
    provider = ScriptedProvider('{"candidates": [', '{"still": broken')
    h = Harness(tmp_path, provider)

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "parse_failed_archived"
    assert (receipt.raw_reason, receipt.raw_error_type) == ("llm_error", "ValueError")
    assert len(provider.prompts) == 2
    assert "Repair the failed OpenSquilla session-flush" in provider.prompts[1]
    assert '{"candidates": [' in provider.prompts[1]
    assert h.scopes()[-1] == ("repair", "repair_pending", "parse_failed_archived")


async def test_repair_prompt_can_rescue_the_flush(tmp_path: Path) -> None:
    provider = ScriptedProvider("READY", _answer(_fact()))
    h = Harness(tmp_path, provider)

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "ok_candidates_written"
    assert h.scopes()[-1] == ("flush", "flush_appended", None)


async def test_provider_error_is_provider_failed_with_redacted_detail(tmp_path: Path) -> None:
    error = ProviderCompletionError("upstream 502 for Bearer sk-secretsecret", code="http_502")
    h = Harness(tmp_path, ScriptedProvider(error))

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "provider_failed_archived"
    assert receipt.raw_error_code == "http_502"
    assert "secret" not in (receipt.raw_error_message or "")
    assert "Bearer [REDACTED]" in (receipt.raw_error_message or "")
    assert h.scopes()[-1] == ("repair", "repair_pending", "provider_failed_archived")


async def test_any_provider_exception_counts_as_provider_failure(tmp_path: Path) -> None:
    h = Harness(tmp_path, ScriptedProvider(ConnectionResetError("peer reset")))

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "provider_failed_archived"
    assert receipt.raw_error_type == "ProviderCompletionError"


async def test_timeout_is_provider_failed_with_reason_timeout(tmp_path: Path) -> None:
    class SlowProvider:
        async def complete(self, **_kwargs: Any) -> SimpleNamespace:
            await asyncio.sleep(5)
            return SimpleNamespace(content=_answer(_fact()))

    h = Harness(tmp_path, SlowProvider())

    receipt = await h.service.execute(_transcript(), KEY, timeout=0.05)

    assert (receipt.raw_reason, receipt.result_status) == ("timeout", "provider_failed_archived")
    assert receipt.raw_error_type == "TimeoutError"
    assert h.scopes()[-1] == ("repair", "repair_pending", "provider_failed_archived")


async def test_memory_save_error_is_apply_failed(tmp_path: Path) -> None:
    async def failing_tool(call: ToolCall) -> ToolResult:
        return ToolResult(tool_use_id=call.tool_use_id, content="disk full", is_error=True)

    h = Harness(tmp_path, ScriptedProvider(_answer(_fact())), tool_handler=failing_tool)

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "apply_failed_archived"
    assert receipt.raw_error_message == "disk full"
    assert h.scopes()[-1] == ("repair", "repair_pending", "apply_failed_archived")


async def test_provider_without_complete_or_chat_is_a_parse_failure(tmp_path: Path) -> None:
    h = Harness(tmp_path, object())

    receipt = await h.service.execute(_transcript(), KEY)

    assert (receipt.result_status, receipt.raw_error_type) == ("parse_failed_archived", "TypeError")


async def test_streaming_chat_provider_shape(tmp_path: Path) -> None:
    answer = _answer(_fact())

    class StreamingProvider:
        def chat(self, messages: list[Message], *, config: Any) -> Any:
            async def stream() -> Any:
                for part in (answer[:10], answer[10:]):
                    yield SimpleNamespace(kind="text_delta", text=part)
                yield SimpleNamespace(kind="done", text="")

            return stream()

    h = Harness(tmp_path, StreamingProvider())

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "ok_candidates_written"


async def test_stream_error_event_is_a_provider_failure(tmp_path: Path) -> None:
    class ErrorStream:
        def chat(self, messages: list[Message], *, config: Any) -> Any:
            async def stream() -> Any:
                yield SimpleNamespace(kind="error", message="too large", code="request_too_large")

            return stream()

    h = Harness(tmp_path, ErrorStream())

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "provider_failed_archived"
    assert receipt.raw_error_code == "request_too_large"


# --- archive failures --------------------------------------------------------------------


async def test_required_preimage_failure_without_checkpoint_is_checkpoint_failed() -> None:
    provider = ScriptedProvider(_answer(_fact()))
    h = Harness(None, provider)

    receipt = await h.service.execute(
        _transcript(), KEY, raw_capture_policy="required", checkpoint_exists=False
    )

    assert (receipt.mode, receipt.result_status) == ("error", "archive_failed")
    assert "workspace is not configured" in (receipt.error or "")
    assert provider.prompts == []
    assert h.scopes() == [("checkpoint", "checkpoint_failed", "archive_failed")]
    assert h.rows[0]["target_path"] is None


async def test_archive_failure_with_a_checkpoint_is_repair_failed(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x", encoding="utf-8")
    h = Harness(not_a_dir, ScriptedProvider())

    receipt = await h.service.execute(
        _transcript(), KEY, raw_capture_policy="required", checkpoint_exists=True
    )

    assert receipt.result_status == "archive_failed"
    assert h.scopes() == [("repair", "repair_failed", "archive_failed")]


async def test_checkpoint_flag_comes_from_the_resolver_once(tmp_path: Path) -> None:
    calls: list[tuple[str, str | None]] = []

    async def checkpoint_exists(key: str, session_id: str | None) -> bool:
        calls.append((key, session_id))
        return False

    h = Harness(
        None,
        None,
        checkpoint_exists_resolver=checkpoint_exists,
        session_identity_resolver=lambda _key: "session-7",
    )

    receipt = await h.service.execute(_transcript(), KEY)

    # best_effort: the pre-image failed, so the no_provider fallback tried again and failed.
    assert receipt.result_status == "archive_failed"
    assert calls == [(KEY, "session-7")]
    assert h.scopes() == [("checkpoint", "checkpoint_failed", "archive_failed")]
    assert h.rows[0]["session_id"] == "session-7"


async def test_a_raising_workspace_resolver_is_an_archive_failure(tmp_path: Path) -> None:
    def broken_resolver(_agent: str) -> Path:
        raise RuntimeError("memory manager unavailable")

    h = Harness(tmp_path, None, archive_workspace_resolver=broken_resolver)

    receipt = await h.service.execute(_transcript(), KEY, checkpoint_exists=True)

    assert receipt.result_status == "archive_failed"
    assert "memory manager unavailable" in (receipt.error or "")
    assert h.scopes() == [("repair", "repair_failed", "archive_failed")]


async def test_best_effort_preimage_failure_still_runs_the_llm(tmp_path: Path) -> None:
    workspace_ready = {"ok": False}
    h = Harness(
        tmp_path,
        ScriptedProvider(_answer(_fact())),
        archive_workspace_resolver=lambda _agent: tmp_path if workspace_ready["ok"] else None,
    )

    receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "ok_candidates_written"
    assert h.scopes() == [("flush", "flush_appended", None)]


async def test_direct_raw_fallback_failures_are_not_cached(tmp_path: Path) -> None:
    h = Harness(None, None)

    for _ in range(2):
        receipt = await h.service._raw_dump_fallback(
            _transcript(), reason="timeout", session_key=KEY, checkpoint_exists=False
        )
        assert receipt.result_status == "archive_failed"

    assert h.scopes() == [("checkpoint", "checkpoint_failed", "archive_failed")] * 2


async def test_identical_raw_archives_are_deduplicated_in_process(tmp_path: Path) -> None:
    h = Harness(tmp_path, None)

    first = await h.service.execute(_transcript(), KEY)
    second = await h.service.execute(_transcript(), KEY)

    assert first.flushed_paths == second.flushed_paths
    assert h.events.count("archive:preimage") == 1


async def test_a_cached_archive_reports_the_current_outcome(tmp_path: Path) -> None:
    provider = ScriptedProvider(
        "{broken", "{still broken", ProviderCompletionError("down", code="http_503")
    )
    h = Harness(tmp_path, provider)

    first = await h.service.execute(_transcript(), KEY, raw_capture_policy="off")
    second = await h.service.execute(_transcript(), KEY, raw_capture_policy="off")

    assert first.flushed_paths == second.flushed_paths
    assert h.events.count("archive:llm_error") == 1
    assert (first.result_status, second.result_status) == (
        "parse_failed_archived",
        "provider_failed_archived",
    )
    assert second.raw_error_code == "http_503"
    assert [r["reason"] for r in h.rows] == ["parse_failed_archived", "provider_failed_archived"]


def test_llm_receipt_without_a_hash_gets_a_synthetic_one() -> None:
    from receipts_app.flush.calls import FlushRun

    run = FlushRun(agent_id="main", session_key=KEY, turn_id="cmp_1", source_path="s")
    receipt = replace(_safe_receipt(), indexed_chunk_count=3)

    stamped = SessionFlushService._stamp(receipt, run)

    material = "ok_candidates_written|memory/x.md|3|cmp_1"
    assert stamped.content_hash == hashlib.sha256(material.encode()).hexdigest()
    assert (stamped.turn_id, stamped.source_path) == ("cmp_1", "s")


# --- identity, windowing, normalisation ------------------------------------------------------


async def test_identity_is_stamped_from_resolvers_and_window(tmp_path: Path) -> None:
    h = Harness(tmp_path, None, session_identity_resolver=lambda _key: "session-1")

    receipt = await h.service.execute(_transcript(40), KEY)

    assert receipt.turn_id == "flush:11-40"
    assert receipt.session_id == "session-1"
    assert receipt.source_path == f"session:{KEY}:flush:11-40"
    assert (receipt.input_message_count, receipt.selected_start_index) == (40, 11)
    assert (receipt.first_included_message, receipt.last_included_message) == (11, 40)
    archived = (tmp_path / receipt.flushed_paths[0]).read_text(encoding="utf-8")
    assert "message 10\n" not in archived and archived.endswith("message 40")
    for row in h.rows:
        assert (row["session_id"], row["turn_id"]) == ("session-1", "flush:11-40")
        assert row["session_key"] == KEY
        assert row["content_hash"] == receipt.content_hash


async def test_window_zero_keeps_everything_and_turn_id_can_be_given(tmp_path: Path) -> None:
    h = Harness(tmp_path, None)

    receipt = await h.service.execute(_transcript(40), KEY, message_window=0, turn_id="cmp_1")

    assert receipt.turn_id == "cmp_1"
    assert receipt.selected_start_index == 1
    assert receipt.source_path == f"session:{KEY}:cmp_1"


async def test_normalisation_rules(tmp_path: Path) -> None:
    envelope = json.dumps(
        {
            "text": "see file",
            "attachments": [{"name": "a.png", "type": "image/png", "data": "QUJD"}],
        }
    )
    transcript = [
        SimpleNamespace(role="system", content="you are a bot"),
        SimpleNamespace(role="user", content=envelope),
        SimpleNamespace(role="tool", content="tool output"),
        SimpleNamespace(role="assistant", content=None),
        SimpleNamespace(role="assistant", content="y" * 60_000),
        Message(role="user", content="dated", message_id="m-9", created_at=1_780_000_000_000),
    ]
    h = Harness(tmp_path, None)

    receipt = await h.service.execute(transcript, KEY, message_window=0)

    assert receipt.input_message_count == 3
    archived = (tmp_path / receipt.flushed_paths[0]).read_text(encoding="utf-8")
    lines = archived.split("\n")
    assert lines[2:4] == ["user: see file", "[attachment: a.png (image/png)]"]
    assert "QUJD" not in archived and "bot" not in archived and "tool output" not in archived
    assert lines[4] == "assistant: " + "y" * 500
    assert lines[5] == "user: [opensquilla-message: date=2026-05-28 message=3 anchor=m-9]"


async def test_pasted_dialogue_is_split_into_anchored_messages(tmp_path: Path) -> None:
    pasted = (
        "Session 2 on 2024-03-01\n"
        "Alice: I adopted a cat yesterday [dia_id: D2:1]\n"
        "Bob: Nice! [dia_id: D2:2]\n"
    )
    provider = ScriptedProvider(_answer(noop_reason="nothing new"))
    h = Harness(tmp_path, provider)

    receipt = await h.service.execute([Message(role="user", content=pasted)], KEY)

    assert receipt.input_message_count == 2
    assert "[opensquilla-message: date=2024-03-01 message=1 anchor=D2:1]" in provider.prompts[0]
    # The model said "nothing", but the anchored, dated user line is an obligation.
    assert receipt.result_status == "ok_candidates_written"
    assert receipt.obligation_status == "backfilled"
    saved = (tmp_path / receipt.flushed_paths[0]).read_text(encoding="utf-8")
    assert "## Source Events" in saved and "(2024-02-29)" in saved


@pytest.mark.parametrize(
    "kwargs",
    [
        {"message_window": -1},
        {"flush_max_chars": 0},
        {"segment_mode": "sometimes"},
        {"segment_max_chars": 0},
        {"segment_overlap_messages": -1},
        {"raw_capture_policy": "maybe"},
    ],
)
async def test_bad_arguments_raise_value_error(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    h = Harness(tmp_path, None)

    with pytest.raises(ValueError):
        await h.service.execute(_transcript(), KEY, **kwargs)


async def test_cancellation_propagates(tmp_path: Path) -> None:
    class HangingProvider:
        async def complete(self, **_kwargs: Any) -> Any:
            await asyncio.sleep(10)

    h = Harness(tmp_path, HangingProvider())
    task = asyncio.create_task(h.service.execute(_transcript(), KEY, timeout=30))
    await asyncio.sleep(0.05)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task


# --- the receipt_writer contract -------------------------------------------------------------


async def test_writer_exceptions_are_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    def exploding_writer(_receipt: FlushReceipt, **_row: Any) -> None:
        raise KeyError("session generation changed")

    h = Harness(tmp_path, None, receipt_writer=exploding_writer)

    with caplog.at_level(logging.ERROR, logger="receipts_app.flush.service"):
        receipt = await h.service.execute(_transcript(), KEY)

    assert receipt.result_status == "ok_archive_only"
    messages = [record.getMessage() for record in caplog.records]
    assert "session_flush.preimage_receipt_write_failed" in messages
    assert "session_flush.receipt_write_failed" in messages


async def test_sync_writer_and_resolvers_are_supported(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = []
    service = SessionFlushService(
        provider_selector=lambda _agent: None,
        tool_registry=REGISTRY,
        tool_handler=lambda call: ToolResult(tool_use_id=call.tool_use_id, content=""),
        receipt_writer=lambda _receipt, **row: rows.append(row),
        session_identity_resolver=lambda _key: "s-1",
        checkpoint_exists_resolver=lambda _key, _sid: True,
        archive_workspace_resolver=lambda _agent: str(tmp_path),
    )

    await service.execute(_transcript(), KEY)

    assert [row["scope"] for row in rows] == ["preimage", "repair"]
    assert set(rows[0]) == {
        "agent_id",
        "session_key",
        "scope",
        "status",
        "reason",
        "target_path",
        "session_id",
        "turn_id",
        "source_path",
        "content_hash",
    }


async def test_seed_raw_fallback_is_recorded_in_the_ledger(tmp_path: Path) -> None:
    """Pure-Python port of the seed's last test, with a list standing in for the ledger."""

    class InvalidJsonProvider:
        async def complete(self, **_kwargs: Any) -> SimpleNamespace:
            return SimpleNamespace(content='{"candidates": [')

    session_key = "agent:main:webchat:abc"
    ledger: dict[str, dict[str, Any]] = {}

    async def handler(call: ToolCall) -> ToolResult:
        raise AssertionError(f"raw fallback must not call {call.tool_name}")

    async def receipt_writer(receipt: FlushReceipt, **row: Any) -> None:
        key = f"{row['scope']}:{row['session_key']}:{row['status']}:{row['target_path']}"
        # Upsert semantics: same idempotency key, one row.
        ledger.setdefault(key, {**row, "session_id": "session-1", "attempt_count": 1})

    service = SessionFlushService(
        provider_selector=lambda _agent_id: InvalidJsonProvider(),
        tool_registry=SimpleNamespace(
            to_tool_definitions=lambda: [SimpleNamespace(name="memory_save")]
        ),
        tool_handler=handler,
        receipt_writer=receipt_writer,
        archive_workspace_resolver=lambda _agent_id: tmp_path,
    )

    receipt = await service.execute(
        [Message(role="user", content="temporary transcript")], session_key, agent_id="main"
    )

    rows = list(ledger.values())
    assert receipt.result_status == "parse_failed_archived"
    assert len(rows) == 2
    assert rows[0]["scope"] == "preimage"
    assert rows[1]["scope"] == "repair"
    assert rows[1]["status"] == "repair_pending"
    assert rows[1]["reason"] == "parse_failed_archived"
    assert rows[1]["target_path"] == receipt.flushed_paths[0]


# --- segmenting -------------------------------------------------------------------------------


async def test_segmented_flush_writes_one_part_per_segment(tmp_path: Path) -> None:
    answers = [_answer(_fact(f"fact {i}"), slug="notes") for i in range(3)]
    provider = ScriptedProvider(*answers)
    h = Harness(tmp_path, provider)
    transcript = [Message(role="user", content=f"{i}" * 40) for i in range(6)]

    receipt = await h.service.execute(transcript, KEY, segment_mode="auto", segment_max_chars=100)

    assert receipt.segment_count == 3
    assert [Path(p).name[11:] for p in receipt.flushed_paths] == [
        "notes-part001.md",
        "notes-part002.md",
        "notes-part003.md",
    ]
    assert receipt.indexed_chunk_count == 3
    part_hashes = "|".join(s["content_hash"] for s in receipt.segments)
    assert receipt.content_hash == hashlib.sha256(part_hashes.encode()).hexdigest()
    assert (receipt.first_included_message, receipt.last_included_message) == (1, 6)
    assert h.scopes()[-1] == ("flush", "flush_appended", None)


async def test_segment_mode_always_with_one_segment_uses_the_plain_path(tmp_path: Path) -> None:
    h = Harness(tmp_path, ScriptedProvider(_answer(_fact(), slug="solo")))

    receipt = await h.service.execute(_transcript(), KEY, segment_mode="always")

    assert receipt.segment_count == 1
    assert receipt.flushed_paths[0].endswith("-solo.md")


# --- the memory_save guard and tool ---------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"path": "memory/2026-05-29-other.md", "content": "x", "mode": "append"},
        {"path": "memory/2026-05-29-plan.md", "content": "x", "mode": "overwrite"},
        {"path": "memory/2026-05-29-plan.md", "content": "x"},
        {"path": "MEMORY.md", "content": "x", "mode": "append"},
        {"path": "memory/.raw_fallbacks/x.md", "content": "x", "mode": "append"},
    ],
)
async def test_guard_rejects_anything_but_appending_to_the_plan_path(
    arguments: dict[str, Any],
) -> None:
    inner_calls: list[ToolCall] = []

    async def inner(call: ToolCall) -> ToolResult:
        inner_calls.append(call)
        return ToolResult(tool_use_id=call.tool_use_id, content="Saved")

    guarded = make_flush_read_only_handler(inner, relative_path="memory/2026-05-29-plan.md")

    result = await guarded(ToolCall("t1", "memory_save", arguments))

    assert result.is_error
    assert result.content == "Flush may only append to memory/2026-05-29-plan.md."
    assert inner_calls == []


@pytest.mark.parametrize("reserved", ["MEMORY.md", "memory/.checkpoints/k/t.jsonl", "SOUL.md"])
async def test_guard_rejects_reserved_paths_even_as_the_plan_path(reserved: str) -> None:
    async def inner(call: ToolCall) -> ToolResult:
        raise AssertionError("must not be called")

    guarded = make_flush_read_only_handler(inner, relative_path=reserved)

    result = await guarded(ToolCall("t1", "memory_save", {"path": reserved, "mode": "append"}))

    assert result.is_error


async def test_memory_save_tool_appends_and_counts_chunks(tmp_path: Path) -> None:
    tool = MemorySaveHandler(lambda agent: tmp_path / agent)
    token = current_tool_context.set(ToolContext(agent_id="ops"))
    try:
        first = await tool(
            ToolCall("t1", "memory_save", {"path": "memory/n.md", "content": "## A\n- one\n- two"})
        )
        second = await tool(
            ToolCall("t2", "memory_save", {"path": "memory/n.md", "content": "para\ngraph"})
        )
    finally:
        current_tool_context.reset(token)

    assert first.content == "Saved to memory/n.md (2 chunks indexed; integrity=ok)."
    assert second.content == "Saved to memory/n.md (1 chunks indexed; integrity=ok)."
    assert (tmp_path / "ops/memory/n.md").read_text() == "## A\n- one\n- two\n\npara\ngraph\n"


@pytest.mark.parametrize(
    "path",
    [
        "../escape.md",
        "/etc/x.md",
        "memory/../../x.md",
        "notes/x.md",
        "memory/x.txt",
        "memory/\x00.md",
    ],
)
async def test_memory_save_tool_refuses_paths_outside_memory(tmp_path: Path, path: str) -> None:
    tool = MemorySaveHandler(lambda _agent: tmp_path / "ws")

    result = await tool(ToolCall("t1", "memory_save", {"path": path, "content": "x"}))

    assert result.is_error
    assert not (tmp_path / "escape.md").exists()


def test_markdown_chunks_ignore_headings_and_blank_lines() -> None:
    assert markdown_chunks("# Title\n\n- a\n* b\n1. c\n\nline one\nline two\n## H\n") == [
        "- a",
        "* b",
        "1. c",
        "line one\nline two",
    ]


# --- strict safety -----------------------------------------------------------------------------


def _safe_receipt(**overrides: Any) -> FlushReceipt:
    base = FlushReceipt(
        mode="llm",
        flushed_paths=["memory/x.md"],
        slug="x",
        message_count=1,
        duration_ms=0,
        raw_reason=None,
        error=None,
        result_status="ok_candidates_written",
        integrity_status="ok",
        indexed_chunk_count=1,
        output_coverage_status="ok",
    )
    return replace(base, **overrides)


@pytest.mark.parametrize(
    ("overrides", "safe"),
    [
        ({}, True),
        ({"indexed_chunk_count": 0}, False),
        ({"integrity_status": "unverified"}, False),
        ({"output_coverage_status": "unverifiable"}, False),
        ({"invalid_candidate_count": 1}, False),
        ({"candidate_missing_ids": ["c1"]}, False),
        ({"obligation_count": 2, "obligation_status": "backfilled"}, True),
        ({"obligation_count": 2, "obligation_status": "coverage_warning"}, False),
        (
            {"obligation_count": 2, "obligation_status": "ok", "obligation_missing_ids": ["o"]},
            False,
        ),
        ({"obligation_missing_ids": ["o"], "obligation_status": "ok"}, False),
    ],
)
def test_strict_safety_predicate(overrides: dict[str, Any], safe: bool) -> None:
    receipt = _safe_receipt(**overrides)

    assert flush_receipt_allows_destructive_compaction(receipt) is safe
    assert flush_receipt_allows_destructive_compaction(receipt.to_dict()) is safe
    assert (ledger_row_fields(receipt, checkpoint_exists=True) is not None) is safe


def test_raw_and_unknown_receipts_are_never_safe() -> None:
    raw = FlushReceipt(
        mode="raw",
        flushed_paths=["memory/.raw_fallbacks/x.md"],
        slug=None,
        message_count=1,
        duration_ms=0,
        raw_reason="timeout",
        error=None,
        result_status="provider_failed_archived",
        indexed_chunk_count=5,
        integrity_status="ok",
        output_coverage_status="ok",
    )
    unknown = replace(raw, result_status="unknown")

    assert not flush_receipt_allows_destructive_compaction(raw)
    assert not flush_receipt_is_successful_flush(None)
    assert ledger_row_fields(unknown, checkpoint_exists=None) is None


def test_receipt_invariants() -> None:
    with pytest.raises(ValueError):
        FlushReceipt(
            mode="raw",
            flushed_paths=[],
            slug=None,
            message_count=0,
            duration_ms=0,
            raw_reason=None,
            error=None,
        )
