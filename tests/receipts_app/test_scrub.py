"""The checkpoint scrub (docs/STATUSES.md#scrub): on a gateway's host, a deleted checkpoint file
and a flipped byte turn both receipts at risk within one cycle, the alert fires, a retake makes
them safe again, and a cycle with nothing changed reads no file bytes."""

from __future__ import annotations

import errno
import os

import pytest
from django.core.management import call_command

from operations_app.alerts.conditions import Snapshot, firing_subjects
from operations_app.models import AlertRule
from receipts_app import health, tasks
from receipts_app.audit import Actor
from receipts_app.checkpoint import record_memory_checkpoint
from receipts_app.counts import receipt_counts
from receipts_app.failure_groups import fold_all
from receipts_app.models import (
    CheckpointVerification,
    FailureGroupCount,
    MemoryDurableReceipt,
    ReceiptEvent,
)
from receipts_app.requeue import requeue_receipt, retake_checkpoint
from receipts_app.requeue.rules import available_actions
from receipts_app.scrub import filecheck, scrub_checkpoints, verified_summary, verify_receipt
from receipts_app.scrub import run as scrub_run
from receipts_app.scrub.throttle import Throttle
from receipts_app.selectors import ReceiptFilter, filter_receipts
from sessions_app.gateways import MisroutedWork, ensure_gateway, using_gateway
from tests.factories import make_session
from tests.query_plans import plan_of

from .requeue_support import sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

ALICE = Actor("alice", "console")


@pytest.fixture
def host_b(settings, workspace):
    """This process is gateway b's host: its worker, with b's checkpoint workspace."""
    ensure_gateway("b")
    settings.OPENSQUILLA_GATEWAY = "b"
    settings.OPENSQUILLA_SCRUB_READ_BYTES_PER_SECOND = 0
    return workspace


def _saved(n: int, *, messages: int = 3) -> list[MemoryDurableReceipt]:
    rows = []
    with using_gateway("b"):
        for index in range(n):
            session = make_session(f"agent:main:webchat:s{index}", messages=messages)
            rows.append(record_memory_checkpoint(session.session_key))
    return rows


def _fresh(row: MemoryDurableReceipt) -> MemoryDurableReceipt:
    return MemoryDurableReceipt.objects.get(pk=row.pk)


def _flip_byte(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def _at_risk_b() -> int:
    return health.at_risk_by_gateway_agent(receipt_counts()).get(("b", "main"), 0)


def test_deleted_and_flipped_checkpoints_are_at_risk_alerted_and_retaken(host_b, sent):
    gone, flipped, whole = _saved(3)
    scrub_checkpoints("b", force=True)
    assert _at_risk_b() == 0
    (host_b / gone.source_path).unlink()
    _flip_byte(host_b / flipped.source_path)

    report = scrub_checkpoints("b", force=True)

    assert (report.missing, report.damaged, report.moved_at_risk) == (1, 1, 2)
    assert _fresh(gone).status == "checkpoint_missing"
    assert _fresh(flipped).status == "hash_mismatch"
    assert _fresh(flipped).reason == (
        "scrub: hash_mismatch: the file's bytes are not the ones the receipt records"
    )
    assert "hash to" in CheckpointVerification.objects.get(receipt_id=flipped.pk).detail
    assert _fresh(whole).status == "checkpoint_saved"
    assert _at_risk_b() == 2
    # Each move is on the receipt's timeline, by the worker.
    events = ReceiptEvent.objects.filter(receipt_id=gone.receipt_id, action="scrub")
    assert [(e.from_status, e.to_status) for e in events] == [
        ("checkpoint_saved", "checkpoint_missing")
    ]
    # The new alert kind fires for b's agent.
    rule = AlertRule.objects.create(
        name="unsafe",
        condition=AlertRule.CHECKPOINT_UNSAFE,
        threshold=1,
        channel=AlertRule.WEBHOOK,
        target="https://alerts.example.com/hook",
    )
    fired = firing_subjects(rule, Snapshot.read())
    assert list(fired) == ["b/main"] and fired["b/main"].value == 2
    # The failure groups count them, one group per verdict.
    fold_all()
    groups = FailureGroupCount.objects.filter(gateway_id="b", agent_id="main", count__gt=0)
    assert sorted(groups.values_list("status", "count")) == [
        ("checkpoint_missing", 1),
        ("hash_mismatch", 1),
    ]
    # The one filter lists exactly those rows.
    unsafe = filter_receipts(ReceiptFilter.from_params({"verified": "unsafe"}))
    assert {r.receipt_id for r in unsafe} == {gone.receipt_id, flipped.receipt_id}

    # Retake: the requeue offers it, and the retaken checkpoint makes both safe again.
    for row in (gone, flipped):
        assert available_actions(_fresh(row))["requeue"] == (True, "")
        outcome = requeue_receipt(receipt_id=row.receipt_id, actor=ALICE)
        assert outcome.outcome == "requeued"
        assert _fresh(row).status == "checkpoint_requeued"
        retake_checkpoint(row.receipt_id)
        assert _fresh(row).status in ("checkpoint_saved", "checkpoint_recovered")
    assert _at_risk_b() == 0
    assert firing_subjects(rule, Snapshot.read()) == {}
    again = scrub_checkpoints("b", force=True)
    assert (again.missing, again.damaged) == (0, 0)
    assert verify_receipt(_fresh(gone)).whole and verify_receipt(_fresh(flipped)).whole


def test_a_cycle_with_nothing_changed_reads_no_file_bytes(host_b):
    rows = _saved(4)
    first = scrub_checkpoints("b", force=True, full=True)
    assert (first.files_read, first.ok) == (4, 4)
    assert first.bytes_read == sum((host_b / r.source_path).stat().st_size for r in rows)

    unchanged = scrub_checkpoints("b", force=True, full=False)

    assert (unchanged.checked, unchanged.stat_only, unchanged.ok) == (4, 4, 4)
    assert (unchanged.files_read, unchanged.bytes_read) == (0, 0)
    # The full cycle reads every file again, changed or not.
    full = scrub_checkpoints("b", force=True, full=True)
    assert (full.files_read, full.bytes_read) == (4, first.bytes_read)


def test_a_file_that_comes_back_whole_restores_the_receipt(host_b):
    (row,) = _saved(1)
    path = host_b / row.source_path
    body = path.read_bytes()
    path.unlink()
    scrub_checkpoints("b", force=True)
    assert _fresh(row).status == "checkpoint_missing"

    path.write_bytes(body)
    report = scrub_checkpoints("b", force=True)

    assert report.restored == 1
    restored = _fresh(row)
    assert (restored.status, restored.reason) == ("checkpoint_saved", None)
    assert CheckpointVerification.objects.get(receipt_id=row.pk).outcome == "ok"


def test_a_file_whose_events_do_not_carry_the_receipts_coverage_is_damaged(host_b):
    (row,) = _saved(1)
    MemoryDurableReceipt.objects.filter(pk=row.pk).update(coverage_entry_count=99)
    scrub_checkpoints("b", force=True)
    damaged = _fresh(row)
    assert damaged.status == "hash_mismatch"
    assert "coverage" in damaged.reason
    verification = CheckpointVerification.objects.get(receipt_id=row.pk)
    assert (verification.outcome, "receipt covers 99" in verification.detail) == (
        "coverage_mismatch",
        True,
    )


@pytest.mark.parametrize("fd_paths", [True, False], ids=["proc-fd", "realpath"])
def test_a_checkpoint_reached_through_a_symlink_out_of_the_workspace_is_damaged(
    host_b, tmp_path, monkeypatch, fd_paths, settings
):
    """The same bytes, but outside the workspace: by a symlinked file or a symlinked
    directory on the way to it. A symlink that stays inside the workspace is fine. Checked
    on the file opened (/proc/self/fd) where the kernel says it, by resolving the path
    elsewhere. Read in this process, where the switch between the two can be turned (the
    reader processes run the same ``filecheck``: tests/receipts_app/test_scrub_readers.py)."""
    monkeypatch.setattr(filecheck, "_HAS_FD_PATHS", fd_paths and filecheck._HAS_FD_PATHS)
    settings.OPENSQUILLA_SCRUB_READER_PROCESSES = 0
    by_file, by_directory, inside = _saved(3)
    outside = tmp_path / "outside"
    outside.mkdir()
    # The file itself is a symlink to a copy outside.
    path = host_b / by_file.source_path
    (outside / "copy.jsonl").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside / "copy.jsonl")
    # A directory on the way is a symlink to a directory outside.
    path = host_b / by_directory.source_path
    path.parent.rename(outside / "moved")
    path.parent.symlink_to(outside / "moved", target_is_directory=True)
    # The file is a symlink to a copy elsewhere inside the workspace.
    path = host_b / inside.source_path
    (host_b / "kept.jsonl").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(host_b / "kept.jsonl")

    report = scrub_checkpoints("b", force=True, full=True)

    assert (report.ok, report.damaged, report.missing) == (1, 2, 0)
    for row in (by_file, by_directory):
        assert _fresh(row).status == "hash_mismatch"
        verification = CheckpointVerification.objects.get(receipt_id=row.pk)
        assert verification.outcome == "unreadable"
        assert "escapes the workspace" in verification.detail
    assert _fresh(inside).status == "checkpoint_saved"


@pytest.mark.skipif(not hasattr(os, "O_NOATIME"), reason="no O_NOATIME here")
def test_a_worker_that_does_not_own_the_files_still_reads_them(host_b, monkeypatch, settings):
    """O_NOATIME is the owner's alone (EPERM for anyone else): such a worker reads plainly.
    Read in this process, where ``os.open`` can be made to refuse."""
    settings.OPENSQUILLA_SCRUB_READER_PROCESSES = 0
    rows = _saved(2)
    real_open = os.open

    def not_the_owner(path, flags, *args, **kwargs):
        if flags & os.O_NOATIME:
            raise PermissionError(errno.EPERM, "Operation not permitted", path)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setitem(filecheck._noatime, "flags", filecheck._OPEN_FLAGS | filecheck._NOATIME)
    monkeypatch.setattr(filecheck.os, "open", not_the_owner)
    report = scrub_checkpoints("b", force=True, full=True)
    assert (report.files_read, report.ok) == (len(rows), len(rows))


def test_a_directory_where_the_checkpoint_was_is_damaged(host_b):
    (row,) = _saved(1)
    path = host_b / row.source_path
    path.unlink()
    path.mkdir()
    scrub_checkpoints("b", force=True, full=True)
    assert _fresh(row).status == "hash_mismatch"
    verification = CheckpointVerification.objects.get(receipt_id=row.pk)
    assert (verification.outcome, verification.detail) == (
        "unreadable",
        f"{row.source_path} is not a file",
    )


def test_a_full_cycle_over_whole_files_keeps_each_verification_as_it_was(host_b):
    """The second full read of unchanged files moves only when they were verified."""
    rows = _saved(3)
    scrub_checkpoints("b", force=True, full=True)
    columns = ("outcome", "detail", "size", "mtime_ns", "moved_from", "parsed_hash")
    first = list(CheckpointVerification.objects.order_by("pk").values_list(*columns))
    report = scrub_checkpoints("b", force=True, full=True)
    assert (report.files_read, report.ok) == (3, 3)
    assert list(CheckpointVerification.objects.order_by("pk").values_list(*columns)) == first
    assert [v[0] for v in first] == ["ok"] * len(rows) and all(v[5] for v in first)


def test_the_scrub_never_writes_into_the_workspace(host_b):
    rows = _saved(2)
    (host_b / rows[0].source_path).unlink()
    _flip_byte(host_b / rows[1].source_path)
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in host_b.rglob("*") if p.is_file()}
    scrub_checkpoints("b", force=True, full=True)
    after = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in host_b.rglob("*") if p.is_file()}
    assert after == before


def test_a_scrub_runs_only_where_the_gateways_files_are(settings, workspace):
    ensure_gateway("b")
    settings.OPENSQUILLA_GATEWAY = "local"
    with pytest.raises(MisroutedWork):
        scrub_checkpoints("b", force=True)
    assert tasks.scrub_checkpoints.run(gateway="b", force=True)["status"] == "refused"


def test_a_run_out_of_time_resumes_where_it_stopped(host_b, monkeypatch):
    _saved(3)
    monkeypatch.setattr(scrub_run, "BATCH", 1)
    first = scrub_checkpoints("b", force=True, full=True, seconds=1e-9)
    assert (first.state, first.checked) == ("running", 1)
    rest = scrub_checkpoints("b", seconds=0)
    assert (rest.state, rest.checked, rest.files_read) == ("done", 2, 2)
    # The cycle ended; the next one waits for OPENSQUILLA_SCRUB_CYCLE_SECONDS.
    assert scrub_checkpoints("b").state == "idle"


def test_the_throttle_keeps_reads_under_the_rate():
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    throttle = Throttle(1000, sleep=sleep, clock=lambda: now[0])
    throttle(500)
    throttle(1500)
    assert sum(slept) == pytest.approx(2.0)
    assert Throttle(0, sleep=sleep, clock=lambda: now[0])(10**9) is None


def test_a_throttled_full_read_waits_after_every_file_ahead_of_the_rate(host_b):
    """Eight readers, one rate: at one byte a second every file read puts the run ahead, so
    each one waits (the sleeps are recorded, not slept)."""
    _saved(3)
    slept: list[float] = []
    report = scrub_checkpoints("b", force=True, full=True, rate=1, sleep=slept.append)
    assert report.files_read == 3 and len(slept) == 3


def test_verified_summary_counts_a_gateways_saved_memory(host_b):
    rows = _saved(3)
    (host_b / rows[0].source_path).unlink()
    scrub_checkpoints("b", force=True)
    summary = verified_summary()["b"]
    assert (summary.saved, summary.verified, summary.missing, summary.damaged) == (3, 2, 1, 0)


def test_verify_checkpoints_exits_non_zero_on_a_missing_file(host_b, capsys):
    rows = _saved(2)
    call_command("verify_checkpoints")
    assert "2 whole, 0 missing" in capsys.readouterr().out
    os.remove(host_b / rows[1].source_path)
    with pytest.raises(SystemExit) as exited:
        call_command("verify_checkpoints", "--gateway", "b", "--agent", "main")
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert rows[1].receipt_id in out and "missing" in out


def test_beat_queues_each_gateways_scrub_to_the_worker_holding_its_files(db, sent):
    from operations_app import heartbeats
    from receipts_app.models import OutboxMessage

    for name in ("a", "b"):
        ensure_gateway(name)
    heartbeats.mark_started("worker", "b@host", {"queues": ["gateway.b"]})

    assert tasks.scrub_tick.run() == {"queued": ["b", "local"]}  # a has no live worker
    queues = sorted(
        OutboxMessage.objects.filter(task="scrub_checkpoints").values_list("queue", flat=True)
    )
    assert queues == ["", "gateway.b"]
    # The last ones still wait in the outbox: beat queues no second one.
    assert tasks.scrub_tick.run() == {"queued": []}


@pytest.mark.parametrize("full", [True, False])
@pytest.mark.parametrize("agent", ["", "main"])
def test_the_walk_reads_a_batch_from_the_scrub_index_not_the_whole_gateway(full, agent):
    """A batch of the walk costs its own rows at any ledger size: the planner serves it
    from idx_mdr_scrub_walk (gateway, id), in id order from the cursor."""
    columns = scrub_run._READ if full else scrub_run._WALK
    walk = scrub_run._selection("b", agent).order_by("id").values_list(*columns)
    sql, params = walk.filter(id__gt=0)[: scrub_run.BATCH].query.sql_with_params()
    plan = plan_of(sql, params)
    assert "idx_mdr_scrub_walk" in plan, plan
    assert "TEMP B-TREE" not in plan, plan  # no sort: the index is in id order
