"""Restore: a checkpoint read back, compared with the transcript, and the loss it would leave."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from receipts_app.checkpoint import record_memory_checkpoint
from receipts_app.models import MemoryDurableReceipt
from receipts_app.restore import (
    CheckpointElsewhere,
    CheckpointMissing,
    NotACheckpoint,
    checkpoint_jsonl_stream,
    checkpoint_markdown_stream,
    loss_for_receipt,
    restore_checkpoint,
)
from sessions_app import services as session_services
from sessions_app.models import CompactedTranscriptEntry, TranscriptEntry
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db

GOLDEN_WORKSPACES = ("opensquilla-0.3.0", "opensquilla-0.5.3", "opensquilla-head")


def golden_bodies(golden_dir: Path) -> list[tuple[str, bytes]]:
    """Every checkpoint file the golden data holds: (name, exact bytes)."""
    bodies: list[tuple[str, bytes]] = []
    for name in ("checkpoints.json", "checkpoint_content_shapes.json"):
        for index, case in enumerate(json.loads((golden_dir / name).read_text("utf-8"))):
            bodies.append((f"{name}[{index}]", case["file_body"].encode("utf-8")))
    for release in GOLDEN_WORKSPACES:
        root = golden_dir / release / "workspace" / "memory" / ".checkpoints"
        for path in sorted(root.rglob("*.jsonl")):
            bodies.append((f"{release}/{path.name}", path.read_bytes()))
    return bodies


def saved_receipt_for(workspace: Path, body: bytes, *, name: str) -> MemoryDurableReceipt:
    """A ``checkpoint_saved`` receipt for ``body`` written into the workspace as it is."""
    first = json.loads(body.decode("utf-8").splitlines()[0])
    digest = hashlib.sha256(body).hexdigest()
    relative = f"memory/.checkpoints/golden/{hashlib.sha256(name.encode()).hexdigest()[:16]}.jsonl"
    (workspace / relative).parent.mkdir(parents=True, exist_ok=True)
    (workspace / relative).write_bytes(body)
    return make_receipt(
        session_key=first["session_key"],
        session_id=first["session_id"],
        turn_id=first["turn_id"],
        source_path=relative,
        content_hash=digest,
        idempotency_key=f"checkpoint:{name}:{digest}",
    )


def flatten(view) -> list[dict]:
    """The read-back conversation as the events it came from, in order."""
    out = []
    for entry in view.readback.entries:
        for event in [entry.message, *entry.tool_calls]:
            out.append(
                {
                    "sequence": event.sequence,
                    "event_id": event.event_id,
                    "role": event.role,
                    "content": event.content,
                    "tool_name": event.tool_name,
                    "tool_call_id": event.tool_call_id,
                    "timestamp_ms": event.timestamp_ms,
                }
            )
    return out


def test_every_golden_checkpoint_reads_back_exactly(golden_dir, workspace):
    bodies = golden_bodies(golden_dir)
    assert len(bodies) >= 36
    for name, body in bodies:
        receipt = saved_receipt_for(workspace, body, name=name)
        view = restore_checkpoint(receipt, limit=500)
        events = [json.loads(line) for line in body.decode("utf-8").splitlines()]
        expected = [{key: event[key] for key in flatten_keys()} for event in events]
        assert flatten(view) == expected, name
        assert view.file_state == "whole", name
        assert view.loss is None
        assert view.readback.event_count == len(events)
        # The download is the file byte for byte.
        _file, chunks = checkpoint_jsonl_stream(receipt)
        assert b"".join(chunks) == body, name
        # The Markdown holds every event's content.
        _md, md_chunks = checkpoint_markdown_stream(receipt)
        markdown = b"".join(md_chunks).decode("utf-8")
        for event in events:
            assert event["content"] in markdown, name


def flatten_keys() -> tuple[str, ...]:
    return ("sequence", "event_id", "role", "content", "tool_name", "tool_call_id", "timestamp_ms")


def checkpoint_of(session) -> MemoryDurableReceipt:
    return record_memory_checkpoint(session.session_key)


def test_comparison_after_compaction_and_new_entries(workspace):
    session = make_session(messages=6)
    session_services.append_message(
        session.session_key,
        role="assistant",
        content="calling",
        tool_calls=[{"id": "c1", "function": {"name": "grep", "arguments": '{"q": "x"}'}}],
    )
    saved = checkpoint_of(session)
    entries = list(TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id"))
    # Compaction drops the two oldest entries; two new ones arrive.
    dropped = entries[:2]
    TranscriptEntry.objects.filter(pk__in=[e.pk for e in dropped]).delete()
    new = [
        session_services.append_message(session.session_key, role="user", content="later 1"),
        session_services.append_message(session.session_key, role="assistant", content="later 2"),
    ]

    view = restore_checkpoint(saved.receipt_id)

    comparison = view.comparison
    assert comparison.same == 5
    assert comparison.checkpoint_only == 2
    assert comparison.transcript_only == 2
    only_in_checkpoint = [
        e.message.content for e in view.readback.entries if e.position not in comparison.matched
    ]
    assert only_in_checkpoint == [dropped[0].content, dropped[1].content]
    assert [t.ref for t in comparison.transcript_only_entries] == [str(e.id) for e in new]
    matched = {e.position: comparison.matched.get(e.position) for e in view.readback.entries}
    assert matched[3] == str(entries[2].id)
    # The tool call stays with the entry that made it.
    last = view.readback.entries[-1]
    assert [c.tool_name for c in last.tool_calls] == ["grep"]
    assert comparison.matched[last.position] == str(entries[-1].id)


def test_paging_says_what_it_shows(workspace):
    session = make_session(messages=7)
    saved = checkpoint_of(session)
    view = restore_checkpoint(saved, offset=5, limit=5)
    assert (view.shown_from, view.shown_to, view.readback.entry_count) == (6, 7, 7)
    assert view.next_offset is None
    assert view.previous_offset == 0
    assert [e.message.content for e in view.readback.entries] == ["message 5", "message 6"]
    # The comparison covers the whole file, not the page.
    assert view.comparison.same == 7


def test_errors_unknown_not_checkpoint_missing_elsewhere(workspace, settings):
    with pytest.raises(KeyError):
        restore_checkpoint("no-such-receipt")
    flush = make_receipt(scope="flush", status="flush_done", source_path="session:x:y")
    with pytest.raises(NotACheckpoint):
        restore_checkpoint(flush.receipt_id)
    session = make_session(messages=2)
    saved = checkpoint_of(session)
    (workspace / saved.source_path).unlink()
    with pytest.raises(CheckpointMissing) as missing:
        restore_checkpoint(saved.receipt_id)
    # Nothing is lost: the transcript still holds every covered entry.
    assert missing.value.loss is not None
    assert missing.value.loss.lost_count == 0
    assert missing.value.loss.retake_possible
    settings.OPENSQUILLA_GATEWAY = "edge-a"
    with pytest.raises(CheckpointElsewhere) as elsewhere:
        restore_checkpoint(saved.receipt_id)
    assert "gateway local" in str(elsewhere.value)
    assert "OPENSQUILLA_GATEWAY=local" in str(elsewhere.value)


def _damage(path: Path, needle: bytes) -> None:
    data = path.read_bytes()
    at = data.index(needle)
    path.write_bytes(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1 :])


def test_loss_none_while_transcript_whole_even_with_a_flipped_byte(workspace):
    session = make_session(messages=4)
    saved = checkpoint_of(session)
    _damage(workspace / saved.source_path, b"message 2")
    report = loss_for_receipt(saved)
    assert report.file_state == "damaged"
    assert report.exact
    assert report.lost_count == 0
    assert report.retake_possible
    # The damaged entry is located on the page.
    view = restore_checkpoint(saved)
    assert [e.position for e in view.readback.entries if not e.intact] == [3]
    assert view.loss is not None and view.loss.lost_count == 0


def test_loss_lists_exactly_entries_in_no_transcript_and_no_other_checkpoint(workspace):
    session = make_session(messages=6)
    older = checkpoint_of(session)  # holds messages 0-5
    entries = list(TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id"))
    session_services.append_message(session.session_key, role="user", content="message 6")
    session_services.append_message(session.session_key, role="user", content="message 7")
    newer = checkpoint_of(session)  # holds messages 0-7
    # Compaction: 0-1 are kept as pre-images, 2-3 dropped for good; 4-7 stay live.
    for entry in entries[:2]:
        CompactedTranscriptEntry.objects.create(
            gateway_id=entry.gateway_id,
            session_id=entry.session_id,
            session_key=entry.session_key,
            compaction_id="cmp_1",
            original_entry_id=entry.id,
            message_id=entry.message_id,
            role=entry.role,
            content=entry.content,
            created_at=entry.created_at,
        )
    TranscriptEntry.objects.filter(pk__in=[e.pk for e in entries[:4]]).delete()

    # The newer checkpoint is damaged at message 3: that entry's content is unreadable;
    # message 2 is intact there but held only by the older checkpoint.
    _damage(workspace / newer.source_path, b"message 3")
    report = loss_for_receipt(newer)
    assert report.file_state == "damaged"
    assert not report.exact
    assert (report.held_live, report.held_compacted, report.held_other_checkpoints) == (4, 2, 1)
    assert [(e.position, e.content_known) for e in report.lost] == [(4, False)]
    assert report.lost_count == 1
    assert not report.retake_possible

    # With the older checkpoint gone too, message 2 is lost as well (and named).
    (workspace / older.source_path).unlink()
    report = loss_for_receipt(newer)
    assert [(e.position, e.preview) for e in report.lost] == [(3, "message 2"), (4, None)]

    # The newer file gone entirely: the two entries no transcript holds are lost, unknown.
    (workspace / newer.source_path).unlink()
    report = loss_for_receipt(newer)
    assert report.file_state == "missing"
    assert (report.held_live, report.held_compacted) == (4, 2)
    assert [(e.position, e.content_known) for e in report.lost] == [(None, False)] * 2


def test_loss_when_file_missing_and_entries_dropped(workspace):
    session = make_session(messages=5)
    saved = checkpoint_of(session)
    entries = list(TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id"))
    TranscriptEntry.objects.filter(pk__in=[e.pk for e in entries[:3]]).delete()
    (workspace / saved.source_path).unlink()
    report = loss_for_receipt(saved)
    assert report.file_state == "missing"
    assert report.lost_count == 3
    assert report.held_live == 2
    assert "3 of 5 entries" in report.summary


def test_retake_rule_offers_the_requeue_only_while_the_transcript_is_whole(workspace):
    from receipts_app.requeue.rules import Outcome, decide_retake

    session = make_session(messages=3)
    saved = checkpoint_of(session)
    (workspace / saved.source_path).unlink()
    outcome, message, _ = decide_retake(saved)
    assert outcome == Outcome.REQUEUED
    assert "still whole" in message

    TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id").first().delete()
    outcome, message, _ = decide_retake(saved)
    assert outcome == Outcome.NOT_REQUEUEABLE
    assert "1 of 3 entries" in message and "Acknowledge the loss" in message


def test_a_requeue_of_a_missing_checkpoint_retakes_only_while_its_transcript_is_whole(
    workspace, django_capture_on_commit_callbacks
):
    from receipts_app.audit import Actor
    from receipts_app.requeue import requeue_receipt

    session = make_session(messages=3)
    saved = checkpoint_of(session)
    (workspace / saved.source_path).unlink()
    MemoryDurableReceipt.objects.filter(pk=saved.pk).update(status="checkpoint_missing")
    TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id").first().delete()

    result = requeue_receipt(receipt_id=saved.receipt_id, actor=Actor("ops", "cli"))

    # The covered transcript lost an entry: a retake would not bring it back, so the requeue
    # says what is lost and points at acknowledging it; nothing is queued or moved.
    assert str(result.outcome) == "not_requeueable"
    assert "1 of 3 entries" in result.message and "Acknowledge the loss" in result.message
    assert MemoryDurableReceipt.objects.get(pk=saved.pk).status == "checkpoint_missing"


def test_acknowledging_a_lost_checkpoint_records_the_loss_and_deletes_nothing(workspace):
    from receipts_app.audit import Actor
    from receipts_app.models import ReceiptEvent
    from receipts_app.requeue import acknowledge_receipt

    session = make_session(messages=3)
    saved = checkpoint_of(session)
    TranscriptEntry.objects.filter(session_id=session.session_id).order_by("id").first().delete()
    (workspace / saved.source_path).unlink()
    # What the scrub makes of a receipt whose file is gone.
    MemoryDurableReceipt.objects.filter(pk=saved.pk).update(status="checkpoint_missing")
    result = acknowledge_receipt(
        receipt_id=saved.receipt_id, actor=Actor("ops", "cli"), reason="disk died; accepted"
    )
    assert str(result.outcome) == "acknowledged"
    event = ReceiptEvent.objects.filter(receipt_id=saved.receipt_id, action="acknowledge").get()
    assert event.reason == "disk died; accepted"
    assert event.details["loss"]["lost"] == 1 and event.details["loss"]["file_state"] == "missing"
    # Nothing is deleted: the row stays (acknowledged), the transcript keeps what it had.
    assert MemoryDurableReceipt.objects.get(receipt_id=saved.receipt_id).status == "acknowledged"
    assert TranscriptEntry.objects.filter(session_id=session.session_id).count() == 2


def test_upstream_checkpoints_match_their_imported_transcripts(golden_dir, tmp_path, settings):
    """OpenSquilla 0.3.0's own checkpoints and transcripts: every saved entry is found in the
    transcript it came from, and the coverage hash proves them by id."""
    from receipts_app.importer import import_opensquilla

    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    golden = golden_dir / "opensquilla-0.3.0"
    import_opensquilla(db_path=golden / "sessions.db", workspace=golden / "workspace")
    saved = list(MemoryDurableReceipt.objects.filter(status="checkpoint_saved"))
    assert len(saved) == 9
    exact = 0
    for receipt in saved:
        view = restore_checkpoint(receipt, limit=500)
        assert view.file_state == "whole", receipt.receipt_id
        live = TranscriptEntry.objects.filter(session_id=receipt.session_id).count()
        # A later checkpoint of the same session may cover more; nothing saved is missing.
        assert view.comparison.checkpoint_only == 0, receipt.receipt_id
        assert view.comparison.same == view.readback.entry_count
        assert view.comparison.transcript_only == live - view.readback.entry_count
        report = loss_for_receipt(receipt)
        assert report.lost_count == 0
        exact += report.exact
    # Checkpoints of the live transcript's tail are proven by id and hash.
    assert exact == len(saved)
