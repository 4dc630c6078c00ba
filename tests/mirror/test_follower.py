"""The live mirror against a 0.5.x-shaped gateway database written while the follower runs."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from receipts_app.audit import Actor
from receipts_app.mirror.follower import Follower
from receipts_app.mirror.models import MirroredReceipt, MirroredSession, MirrorSource
from receipts_app.mirror.state import mirror_states
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import acknowledge_receipt
from sessions_app.models import Session, TranscriptEntry

from .opensquilla_source import GROUP_SENDER_KEY, GUEST_KEY, FakeGateway

pytestmark = pytest.mark.django_db

OPERATOR = Actor("alice", "console")


@pytest.fixture
def gateway(tmp_path) -> FakeGateway:
    (tmp_path / "state").mkdir()
    gw = FakeGateway(tmp_path / "state" / "sessions.db")
    yield gw
    gw.close()


@pytest.fixture
def source_workspace(tmp_path) -> Path:
    root = tmp_path / "gateway-workspace"
    (root / "memory" / ".checkpoints").mkdir(parents=True)
    return root


@pytest.fixture
def ours(tmp_path, settings) -> Path:
    root = tmp_path / "ours"
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(root)
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    return root


def follower(gateway: FakeGateway, workspace: Path | None = None, **kwargs) -> Follower:
    return Follower(
        db_path=gateway.path,
        workspace=workspace,
        checkpoint_root=kwargs.pop("checkpoint_root", None),
        memory_template=None,
        interval=0.1,
        owner=kwargs.pop("owner", "test-follower"),
        **kwargs,
    )


def row(receipt_id: str) -> MemoryDurableReceipt:
    return MemoryDurableReceipt.objects.get(receipt_id=receipt_id)


def test_initial_pass_imports_05x_shapes_then_follows_changes(gateway):
    gateway.add_session(GROUP_SENDER_KEY)
    gateway.add_session(GUEST_KEY)
    gateway.add_entry(GROUP_SENDER_KEY, "hello")
    failed = gateway.add_receipt(GROUP_SENDER_KEY, status="checkpoint_failed", reason="disk full")
    guest = gateway.add_receipt(GUEST_KEY, scope="flush", status="flush_saved")
    f = follower(gateway)

    assert f.poll() == "synced"

    assert Session.objects.filter(session_key__in=[GROUP_SENDER_KEY, GUEST_KEY]).count() == 2
    assert row(failed["receipt_id"]).status == "checkpoint_failed"
    assert row(failed["receipt_id"]).turn_id.startswith("maintenance_")
    assert row(failed["receipt_id"]).agent_id == "ops"
    assert row(guest["receipt_id"]).agent_id == "support"
    # upstream's own stamps are kept
    assert row(failed["receipt_id"]).updated_at == failed["updated_at"]
    assert TranscriptEntry.objects.filter(session_key=GROUP_SENDER_KEY).count() == 1
    assert f.poll() == "idle"

    # the gateway writes: a status update, a new receipt, a new message, a new session
    bumped = gateway.update_receipt(failed["receipt_id"], status="checkpoint_saved", reason=None)
    later = gateway.add_receipt(GUEST_KEY, status="checkpoint_failed")
    gateway.add_entry(GUEST_KEY, "second message")
    gateway.add_session("agent:main:main")
    assert f.poll() == "synced"

    moved = row(failed["receipt_id"])
    assert (moved.status, moved.updated_at, moved.reason) == ("checkpoint_saved", bumped, None)
    assert row(later["receipt_id"]).status == "checkpoint_failed"
    assert TranscriptEntry.objects.filter(session_key=GUEST_KEY).count() == 1
    assert Session.objects.filter(session_key="agent:main:main").exists()
    event = ReceiptEvent.objects.get(receipt_id=failed["receipt_id"], action="status_change")
    assert (event.from_status, event.to_status, event.actor) == (
        "checkpoint_failed",
        "checkpoint_saved",
        "opensquilla-mirror",
    )
    assert f.poll() == "idle"
    [state] = mirror_states()
    assert state["status"] == "ok" and state["healthy"]
    assert state["source"] == str(gateway.path.resolve())
    assert state["last_sync_at"] is not None and state["lag_ms"] is not None


def test_a_local_resolution_is_kept_until_upstream_moves_the_receipt_on(gateway):
    gateway.add_session(GROUP_SENDER_KEY)
    failed = gateway.add_receipt(GROUP_SENDER_KEY, status="repair_failed", scope="repair")
    f = follower(gateway)
    f.poll()
    acknowledge_receipt(receipt_id=failed["receipt_id"], actor=OPERATOR, reason="known gap")
    assert row(failed["receipt_id"]).status == "acknowledged"

    # upstream touches the row without changing its status: ours stays resolved
    gateway.update_receipt(failed["receipt_id"], attempt_count=3)
    f.poll()
    assert row(failed["receipt_id"]).status == "acknowledged"

    # upstream moves it on to another status: that is news, and it wins
    gateway.update_receipt(failed["receipt_id"], status="repair_pending")
    f.poll()
    assert row(failed["receipt_id"]).status == "repair_pending"


def test_a_deleted_session_and_an_emptied_table_are_marked_never_deleted(gateway):
    gateway.add_session(GROUP_SENDER_KEY)
    gateway.add_session(GUEST_KEY)
    gone = gateway.add_receipt(GROUP_SENDER_KEY, status="checkpoint_failed")
    kept = gateway.add_receipt(GUEST_KEY)
    gateway.add_entry(GROUP_SENDER_KEY, "to be deleted upstream")
    f = follower(gateway)
    f.poll()

    gateway.delete_session(GROUP_SENDER_KEY)  # 0.5.x purges the key's receipts too
    f.poll()

    assert row(gone["receipt_id"]).status == "checkpoint_failed"
    assert Session.objects.filter(session_key=GROUP_SENDER_KEY).exists()
    assert TranscriptEntry.objects.filter(session_key=GROUP_SENDER_KEY).count() == 1
    assert MirroredReceipt.objects.get(idempotency_key=gone["idempotency_key"]).gone_at
    assert MirroredReceipt.objects.get(idempotency_key=kept["idempotency_key"]).gone_at is None
    assert MirroredSession.objects.get(session_key=GROUP_SENDER_KEY).gone_at
    assert ReceiptEvent.objects.filter(receipt_id=gone["receipt_id"], action="gone_upstream")
    [state] = mirror_states()
    assert (state["receipts_gone"], state["sessions_gone"]) == (1, 1)

    gateway.empty_receipts()  # a profile consolidation
    f.poll()
    assert MemoryDurableReceipt.objects.count() == 2
    assert mirror_states()[0]["receipts_gone"] == 2


def test_a_second_follower_stands_by_while_the_first_holds_the_lease(gateway):
    gateway.add_session(GROUP_SENDER_KEY)
    gateway.add_receipt(GROUP_SENDER_KEY)
    first = follower(gateway, owner="host-a:1")
    second = follower(gateway, owner="host-b:2")
    assert first.poll() == "synced"
    gateway.add_receipt(GROUP_SENDER_KEY)
    assert second.poll() == "standby"
    assert first.poll() == "synced"
    assert MemoryDurableReceipt.objects.count() == 2
    assert MirrorSource.objects.get().lease_owner == "host-a:1"


def test_a_restarted_follower_resumes_from_its_cursor(gateway):
    gateway.add_session(GROUP_SENDER_KEY)
    first = gateway.add_receipt(GROUP_SENDER_KEY)
    follower(gateway).poll()
    gateway.add_receipt(GROUP_SENDER_KEY)
    restarted = follower(gateway)  # same owner: this host's process came back
    assert restarted.poll() == "synced"
    assert MemoryDurableReceipt.objects.count() == 2
    assert restarted.poll() == "idle"
    assert MirroredReceipt.objects.count() == 2
    assert row(first["receipt_id"]).updated_at == first["updated_at"]


def test_a_bad_source_is_reported_and_the_follower_recovers_by_itself(gateway, tmp_path):
    gateway.add_session(GROUP_SENDER_KEY)
    receipt = gateway.add_receipt(GROUP_SENDER_KEY)
    f = follower(gateway)
    f.poll()
    good = tmp_path / "good.db"
    gateway.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    shutil.copy(gateway.path, good)
    gateway.close()

    def swap(content: bytes | None) -> None:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{gateway.path}{suffix}").unlink(missing_ok=True)
        if content is not None:
            gateway.path.write_bytes(content)

    cases = {
        "missing": None,
        "not_sqlite": b"this is not a database at all, just text\n" * 100,
        "corrupt": good.read_bytes()[:1500],
    }
    for code, content in cases.items():
        swap(content)
        assert f.poll() == "error"
        [state] = mirror_states()
        assert (state["status"], state["error_code"]) == ("failing", code), state["error"]
    foreign = sqlite3.connect(gateway.path.with_name("other.db"))
    foreign.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    foreign.commit()
    foreign.close()
    swap(gateway.path.with_name("other.db").read_bytes())
    assert f.poll() == "error"
    assert mirror_states()[0]["error_code"] == "not_opensquilla"
    assert "not an OpenSquilla sessions database" in mirror_states()[0]["error"]
    # local history kept throughout
    assert row(receipt["receipt_id"]).status == "checkpoint_saved"

    swap(good.read_bytes())
    assert f.poll() == "synced"
    [state] = mirror_states()
    assert (state["status"], state["error"]) == ("ok", "")
    assert MemoryDurableReceipt.objects.count() == 1


def test_a_source_replaced_by_another_file_is_read_from_the_start(gateway, tmp_path):
    gateway.add_session(GROUP_SENDER_KEY)
    old = gateway.add_receipt(GROUP_SENDER_KEY)
    f = follower(gateway)
    f.poll()
    gateway.close()
    other_path = tmp_path / "replacement.db"
    other = FakeGateway(other_path)
    other.add_session(GUEST_KEY)
    new = other.add_receipt(GUEST_KEY, status="repair_pending", scope="repair")
    other.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    other.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{gateway.path}{suffix}").unlink(missing_ok=True)
    other_path.replace(gateway.path)  # a new inode at the same path

    assert f.poll() == "synced"
    assert row(new["receipt_id"]).status == "repair_pending"
    assert row(old["receipt_id"]).status == "checkpoint_saved"  # kept
    assert MirroredReceipt.objects.get(idempotency_key=old["idempotency_key"]).gone_at


def test_files_named_by_new_receipts_are_copied_and_a_missing_workspace_is_a_warning(
    gateway, source_workspace, ours
):
    gateway.add_session(GROUP_SENDER_KEY)
    f = follower(gateway, source_workspace, checkpoint_root=ours)
    f.poll()
    relative = "memory/.checkpoints/ops/turn-1.jsonl"
    (source_workspace / relative).parent.mkdir(parents=True)
    (source_workspace / relative).write_bytes(b'{"role": "user"}\n')
    gateway.add_receipt(GROUP_SENDER_KEY, source_path=relative)
    f.poll()
    assert (ours / relative).read_bytes() == b'{"role": "user"}\n'

    moved = source_workspace.with_name("moved-away")
    source_workspace.rename(moved)
    gateway.add_receipt(GROUP_SENDER_KEY)
    assert f.poll() == "synced"  # rows keep flowing
    [state] = mirror_states()
    assert state["status"] == "warning" and "is missing" in state["warning"]
    moved.rename(source_workspace)
    gateway.add_receipt(GROUP_SENDER_KEY)
    f.poll()
    assert mirror_states()[0]["status"] == "ok"


def test_a_silent_follower_counts_as_stopped_and_a_configured_one_never_started_too(
    gateway, settings
):
    gateway.add_session(GROUP_SENDER_KEY)
    follower(gateway).poll()
    MirrorSource.objects.update(heartbeat_at=1)
    assert mirror_states()[0]["status"] == "stopped"

    settings.OPENSQUILLA_SOURCE_DB = str(gateway.path.with_name("elsewhere.db"))
    states = mirror_states()
    assert states[0]["status"] == "stopped" and states[0]["error_code"] == "not_started"


def test_a_locked_source_is_waited_out_and_reported_without_losing_anything(tmp_path):
    path = tmp_path / "sessions.db"
    writer = FakeGateway(path)
    writer.add_session(GROUP_SENDER_KEY)
    first = writer.add_receipt(GROUP_SENDER_KEY)
    writer.conn.execute("PRAGMA journal_mode=DELETE")  # a rollback journal: writers lock readers
    f = Follower(
        db_path=path,
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="lock-test",
        busy_timeout=0.05,
    )
    writer.conn.execute("BEGIN EXCLUSIVE")
    assert f.poll() == "error"
    [state] = mirror_states()
    assert state["error_code"] == "locked" and "locked" in state["error"]
    writer.conn.execute("COMMIT")
    assert f.poll() == "synced"
    assert row(first["receipt_id"]).status == "checkpoint_saved"
    assert mirror_states()[0]["error"] == ""
    writer.close()


def test_the_gateway_closing_its_last_connection_is_not_mistaken_for_a_broken_source(gateway):
    gateway.add_session(GROUP_SENDER_KEY)
    gateway.add_receipt(GROUP_SENDER_KEY)
    f = follower(gateway)
    f.poll()
    gateway.close()
    # Another process opens, writes and closes: its close checkpoints and deletes the WAL
    # (SQLite locks are per process, so this needs a second process to happen).
    script = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
        "c.execute(\"UPDATE memory_durable_receipts SET status = 'checkpoint_failed', "
        'updated_at = updated_at + 1"); c.commit(); c.close()'
    )
    subprocess.run([sys.executable, "-c", script, str(gateway.path)], check=True)  # noqa: S603
    assert not Path(f"{gateway.path}-wal").exists()
    assert f.poll() == "synced"
    assert MemoryDurableReceipt.objects.get().status == "checkpoint_failed"
    assert mirror_states()[0]["error"] == ""


def test_an_unexpected_error_in_a_poll_is_shown_and_the_loop_goes_on(gateway, monkeypatch):
    gateway.add_session(GROUP_SENDER_KEY)
    f = follower(gateway)
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("boom")

    monkeypatch.setattr(f, "_sync", broken)
    f.run(max_polls=2)
    assert len(calls) == 2  # the loop survived the first failure
    [state] = mirror_states()
    assert state["error_code"] == "internal" and "boom" in state["error"]
    monkeypatch.undo()
    f.poll()
    assert mirror_states()[0]["error"] == ""


def test_a_deleted_source_row_is_recreated(gateway):
    gateway.add_session(GROUP_SENDER_KEY)
    f = follower(gateway)
    f.poll()
    MirrorSource.objects.all().delete()
    assert f.poll() == "retry"
    assert f.poll() == "synced"
    assert MirrorSource.objects.get().initial_sync_done


def test_a_pass_that_fails_midway_is_applied_whole_by_the_next(gateway, monkeypatch):
    """One pass is one transaction of ours: a failure in its receipts stage rolls its
    sessions and messages back too, and the next pass applies all of them (not skipping
    the rolled-back session as one it had applied)."""
    from receipts_app.importer import rows

    gateway.add_session(GROUP_SENDER_KEY)
    f = follower(gateway)
    assert f.poll() == "synced"  # the initial pass
    gateway.add_session(GUEST_KEY)
    gateway.add_entry(GUEST_KEY, "kept")
    receipt = gateway.add_receipt(GUEST_KEY, status="checkpoint_failed", reason="disk full")
    real = rows.apply_receipts

    def failing(*args, **kwargs):
        raise sqlite3.OperationalError("database is locked")  # the writer, mid-pass

    monkeypatch.setattr(rows, "apply_receipts", failing)
    assert f.poll() == "error"
    assert not Session.objects.filter(session_key=GUEST_KEY).exists()  # rolled back whole
    monkeypatch.setattr(rows, "apply_receipts", real)

    assert f.poll() == "synced"
    assert Session.objects.filter(session_key=GUEST_KEY).exists()
    assert TranscriptEntry.objects.filter(session_key=GUEST_KEY, content="kept").exists()
    assert row(receipt["receipt_id"]).status == "checkpoint_failed"
