"""record_memory_checkpoint rules the seed does not pin: deadline, fence, paths, bad input."""

from __future__ import annotations

import asyncio
import time

import pytest

import receipts_app.checkpoint as checkpoint
import receipts_app.ledger as ledger
from receipts_app.checkpoint import (
    CheckpointTimeoutError,
    append_checkpoint_events,
    build_checkpoint_events,
    checkpoint_relative_path,
    record_memory_checkpoint,
)
from receipts_app.models import MemoryDurableReceipt
from sessions_app import services
from tests.factories import make_session

pytestmark = pytest.mark.django_db(transaction=True)


def test_saved_checkpoint_writes_the_file_and_a_covering_receipt(workspace):
    session = make_session("agent:main:webchat:cp", messages=3)
    receipt = record_memory_checkpoint(session.session_key, turn_id="cmp_1")
    path = workspace / receipt.source_path
    assert path.is_file()
    assert len(path.read_text().splitlines()) == 3
    assert receipt.status == "checkpoint_saved"
    assert receipt.idempotency_key.endswith(receipt.content_hash)
    # The same transcript again is the same file and the same row.
    again = record_memory_checkpoint(session.session_key, turn_id="cmp_1")
    assert again.receipt_id == receipt.receipt_id
    assert MemoryDurableReceipt.objects.count() == 1


def test_missing_session_and_empty_transcript_write_nothing(workspace):
    with pytest.raises(KeyError, match="Session not found"):
        record_memory_checkpoint("agent:main:none")
    session = make_session("agent:main:webchat:empty")
    with pytest.raises(ValueError, match="checkpoint transcript cannot be empty"):
        record_memory_checkpoint(session.session_key)
    assert not MemoryDurableReceipt.objects.exists()
    assert not any(workspace.iterdir())


def test_unwritable_workspace_records_the_real_reason(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    session = make_session("agent:main:webchat:ro", messages=1)
    with pytest.raises(OSError):
        record_memory_checkpoint(session.session_key, workspace_dir=blocker)
    row = MemoryDurableReceipt.objects.get()
    assert row.status == "checkpoint_failed"
    assert "Not a directory" in row.reason or "File exists" in row.reason
    assert row.source_path is None and row.content_hash is None
    assert ":failed:" in row.idempotency_key


def test_saved_receipt_is_not_restored_when_the_session_is_deleted_mid_write(
    workspace, monkeypatch
):
    session = make_session("agent:main:webchat:del", messages=1)
    original = checkpoint.append_checkpoint_events

    def write_then_delete(*args, **kwargs):
        result = original(*args, **kwargs)
        services.delete_session(session.session_key)
        return result

    monkeypatch.setattr(checkpoint, "append_checkpoint_events", write_then_delete)
    with pytest.raises(KeyError, match="Session generation changed"):
        record_memory_checkpoint(session.session_key)
    assert not MemoryDurableReceipt.objects.exists()
    assert list(workspace.rglob("*.jsonl"))  # the file stays on disk


def test_reset_mid_write_fences_the_saved_receipt(workspace, monkeypatch):
    session = make_session("agent:main:webchat:rst", messages=1)
    original = checkpoint.append_checkpoint_events

    def write_then_reset(*args, **kwargs):
        result = original(*args, **kwargs)
        services.reset_session(session.session_key)
        return result

    monkeypatch.setattr(checkpoint, "append_checkpoint_events", write_then_reset)
    with pytest.raises(KeyError):
        record_memory_checkpoint(session.session_key)
    assert not MemoryDurableReceipt.objects.exists()


def test_deadline_spent_in_the_write_leaves_no_failure_receipt(workspace, monkeypatch):
    session = make_session("agent:main:webchat:slow", messages=1)

    def slow_write(*args, **kwargs):
        time.sleep(0.5)
        raise RuntimeError("too late")

    monkeypatch.setattr(checkpoint, "append_checkpoint_events", slow_write)
    with pytest.raises(CheckpointTimeoutError) as caught:
        record_memory_checkpoint(session.session_key, timeout=0.1)
    assert caught.value.phase == "checkpointing"
    time.sleep(0.6)  # let the abandoned writer thread finish; it must not add a row
    assert not MemoryDurableReceipt.objects.exists()


def test_receipt_write_that_runs_out_of_budget_is_cancelled_not_completed(workspace, monkeypatch):
    session = make_session("agent:main:webchat:slowdb", messages=1)
    real_upsert = ledger.aupsert_memory_durable_receipt
    calls = []

    async def slow_upsert(receipt, **kwargs):
        calls.append(receipt.status)
        await asyncio.sleep(2.5)
        return await real_upsert(receipt, **kwargs)

    monkeypatch.setattr(ledger, "aupsert_memory_durable_receipt", slow_upsert)
    # A budget the file write always fits in, even on a loaded machine (0.2 s did not: the
    # deadline then expired before the receipt write began), and that the write overruns.
    with pytest.raises(CheckpointTimeoutError):
        record_memory_checkpoint(session.session_key, timeout=1.0)
    time.sleep(2.7)
    assert calls == ["checkpoint_saved"]
    assert not MemoryDurableReceipt.objects.exists()


def test_cancelled_real_upsert_rolls_back(workspace, monkeypatch):
    """The product's own async upsert honours cancellation even though it runs in a thread."""
    session = make_session("agent:main:webchat:cancel", messages=1)
    real_upsert = ledger.upsert_memory_durable_receipt

    def slow_after_write(receipt, **kwargs):
        stored = real_upsert(receipt, **kwargs)
        time.sleep(0.4)  # the row is written but not yet committed when the caller gives up
        return stored

    monkeypatch.setattr(ledger, "upsert_memory_durable_receipt", slow_after_write)
    row = MemoryDurableReceipt(
        session_key=session.session_key,
        session_id=session.session_id,
        scope="checkpoint",
        idempotency_key="cancel-me",
        status="checkpoint_saved",
    )

    async def run():
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(ledger.aupsert_memory_durable_receipt(row), 0.1)
        await asyncio.sleep(0.6)

    asyncio.run(run())
    assert not MemoryDurableReceipt.objects.filter(idempotency_key="cancel-me").exists()


@pytest.mark.parametrize(
    ("key", "turn"),
    [
        ("../../etc", "../passwd"),
        ("a/b/../../..", "x/../../y"),
        ("k\x00ey", "t\x00urn"),
        ("/abs", "/"),
    ],
)
def test_checkpoint_paths_never_leave_the_workspace(tmp_path, key, turn):
    relative = checkpoint_relative_path(key, turn)
    assert ".." not in relative.split("/")
    assert "\x00" not in relative
    events = build_checkpoint_events(
        [{"id": 1, "role": "user", "content": "x"}], session_key=key, session_id="s", turn_id=turn
    )
    written = append_checkpoint_events(tmp_path, events)
    target = (tmp_path / written["relative_path"]).resolve()
    assert tmp_path.resolve() in target.parents


def test_writer_replaces_the_file_atomically_and_skips_identical_bytes(tmp_path):
    events = build_checkpoint_events(
        [{"id": 1, "role": "user", "content": "x", "created_at": 1}],
        session_key="k",
        session_id="s",
        turn_id="t",
    )
    first = append_checkpoint_events(tmp_path, events)
    target = tmp_path / first["relative_path"]
    mtime = target.stat().st_mtime_ns
    assert append_checkpoint_events(tmp_path, events) == first
    assert target.stat().st_mtime_ns == mtime
    changed = build_checkpoint_events(
        [{"id": 1, "role": "user", "content": "y", "created_at": 1}],
        session_key="k",
        session_id="s",
        turn_id="t",
    )
    second = append_checkpoint_events(tmp_path, changed)
    assert second["content_hash"] != first["content_hash"]
    assert [p.name for p in target.parent.iterdir()] == ["t.jsonl"]  # no temp files left


def test_writer_rejects_mixed_batches():
    events = build_checkpoint_events(
        [{"id": 1, "role": "user", "content": "x"}], session_key="a", session_id="s"
    )
    other = build_checkpoint_events(
        [{"id": 2, "role": "user", "content": "x"}], session_key="b", session_id="s"
    )
    with pytest.raises(ValueError, match="share session_key and turn_id"):
        append_checkpoint_events("/tmp", events + other)
    with pytest.raises(ValueError):
        append_checkpoint_events("/tmp", [])
