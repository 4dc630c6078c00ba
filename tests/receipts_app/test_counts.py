"""The kept counts and failure groups agree with the receipts table after every kind of write."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection

from opensquilla_site.timeutil import now_ms
from receipts_app import counts, failure_groups, ledger
from receipts_app.audit import Actor
from receipts_app.console.selectors import failure_groups as read_failure_groups
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import acknowledge_receipt, requeue_receipt
from sessions_app.services import delete_session
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db

MAIN = "agent:main:webchat:c"
OPS = "agent:ops:cron:c"


def kept() -> dict[tuple[str, str, str], int]:
    return {(r.agent_id, r.scope, r.status): r.count for r in counts.receipt_counts()}


def assert_exact() -> None:
    assert counts.find_drift() == []
    failure_groups.fold_all()
    assert failure_groups.stored() == failure_groups.recompute()


def _receipt(key: str, i: int, status: str = "checkpoint_saved", **extra) -> MemoryDurableReceipt:
    return MemoryDurableReceipt(
        session_key=key,
        session_id=extra.pop("session_id", "s1"),
        scope=extra.pop("scope", "checkpoint"),
        status=status,
        idempotency_key=f"k:{key}:{i}",
        **extra,
    )


def test_upserts_count_new_rows_and_move_rows_whose_status_changed():
    make_receipt(session_key=MAIN, idempotency_key="a", status="checkpoint_failed", reason="x 1")
    make_receipt(session_key=MAIN, idempotency_key="b", status="checkpoint_saved")
    make_receipt(session_key=OPS, idempotency_key="c", status="checkpoint_saved")
    assert kept() == {
        ("main", "checkpoint", "checkpoint_failed"): 1,
        ("main", "checkpoint", "checkpoint_saved"): 1,
        ("ops", "checkpoint", "checkpoint_saved"): 1,
    }
    # A conflicting re-upsert with a new status moves the row; one with the same adds nothing.
    make_receipt(session_key=MAIN, idempotency_key="a", status="checkpoint_saved")
    make_receipt(session_key=OPS, idempotency_key="c", status="checkpoint_saved")
    assert kept() == {
        ("main", "checkpoint", "checkpoint_saved"): 2,
        ("ops", "checkpoint", "checkpoint_saved"): 1,
    }
    assert_exact()


def test_fenced_upsert_update_claim_and_stale_recovery_keep_counts_exact():
    session = make_session(MAIN)
    ledger.upsert_memory_durable_receipt(
        _receipt(MAIN, 1, "repair_pending", scope="repair", session_id=session.session_id),
        expected_session_id=session.session_id,
    )
    row = make_receipt(session_key=MAIN, scope="repair", status="repair_pending")
    ledger.update_memory_durable_receipt(row.receipt_id, status="repair_failed", reason="boom 7")
    assert kept()[("main", "repair", "repair_failed")] == 1
    other = make_receipt(session_key=MAIN, scope="repair", status="repair_pending")
    claimed = ledger.claim_memory_repair_receipt(other.receipt_id, now_ms=now_ms())
    assert claimed is not None
    assert kept()[("main", "repair", "repair_running")] == 1
    moved = ledger.recover_stale_memory_repair_claims(
        stale_before_ms=now_ms() + 1000, next_retry_at_ms=now_ms(), updated_at_ms=now_ms()
    )
    assert moved == 1
    assert kept() == {
        ("main", "repair", "repair_pending"): 2,
        ("main", "repair", "repair_failed"): 1,
    }
    assert_exact()


def test_bulk_upsert_counts_every_row_once():
    ledger.bulk_upsert_memory_durable_receipts([_receipt(MAIN, i) for i in range(30)])
    ledger.bulk_upsert_memory_durable_receipts(
        [_receipt(MAIN, i, "checkpoint_failed", reason=f"disk {i}") for i in range(10)]
    )
    assert kept() == {
        ("main", "checkpoint", "checkpoint_saved"): 20,
        ("main", "checkpoint", "checkpoint_failed"): 10,
    }
    assert_exact()


def test_requeue_acknowledge_and_orm_writes_keep_counts_exact():
    failed = make_receipt(session_key=MAIN, status="repair_failed", scope="repair", reason="r 1")
    ack = make_receipt(session_key=MAIN, status="checkpoint_failed", reason="disk 2")
    requeue_receipt(receipt_id=failed.receipt_id, actor=Actor("ann", "console"), reason="retry")
    acknowledge_receipt(receipt_id=ack.receipt_id, actor=Actor("ann", "console"), reason="ok")
    # Whatever bypasses the ledger (admin, scripts, raw SQL) is counted too.
    MemoryDurableReceipt.objects.filter(receipt_id=failed.receipt_id).update(agent_id="moved")
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE receipts_app_memorydurablereceipt SET scope = 'flush' WHERE receipt_id = %s",
            [ack.receipt_id],
        )
    assert kept() == {
        ("moved", "repair", "repair_pending"): 1,
        ("main", "flush", "acknowledged"): 1,
    }
    assert_exact()


def test_session_delete_purges_its_counts():
    make_session(MAIN)
    for i in range(3):
        ledger.upsert_memory_durable_receipt(_receipt(MAIN, i, "checkpoint_failed", reason="x"))
    ledger.upsert_memory_durable_receipt(_receipt(OPS, 9))
    assert delete_session(MAIN)
    assert kept() == {("ops", "checkpoint", "checkpoint_saved"): 1}
    assert_exact()


def test_failure_groups_follow_failures_arriving_and_leaving():
    for i in range(3):
        make_receipt(
            session_key=MAIN, status="checkpoint_failed", reason=f"No space left: /srv/a/{i}.jsonl"
        )
    gone = make_receipt(
        session_key=MAIN, status="repair_abandoned", scope="repair", reason="gave up"
    )
    failure_groups.fold_all()
    groups = {(g.status, g.fingerprint): g.count for g in read_failure_groups().groups}
    assert groups == {
        ("checkpoint_failed", "No space left: <path>"): 3,
        ("repair_abandoned", "gave up"): 1,
    }
    acknowledge_receipt(receipt_id=gone.receipt_id, actor=Actor("ann", "console"), reason="fine")
    failure_groups.fold_all()
    result = read_failure_groups()
    assert [(g.status, g.count) for g in result.groups] == [("checkpoint_failed", 3)]
    assert (result.failures, result.total_groups, result.pending) == (3, 1, 0)
    assert_exact()


def test_check_counts_reports_drift_and_fix_repairs_it(capsys):
    make_receipt(session_key=MAIN, status="checkpoint_failed", reason="disk 1")
    make_receipt(session_key=OPS)
    call_command("check_counts")
    assert "match the ledger" in capsys.readouterr().out
    with connection.cursor() as cur:  # damage both tables behind the triggers' back
        cur.execute("DELETE FROM receipts_app_receiptcount WHERE agent_id = 'ops'")
        cur.execute("UPDATE receipts_app_failuregroupcount SET count = 5")
    with pytest.raises(SystemExit) as exit_info:
        call_command("check_counts")
    assert exit_info.value.code == 1
    out = capsys.readouterr().out
    assert (
        "count drift: agent='ops' scope='checkpoint' status='checkpoint_saved': kept 0, actual 1"
        in out
    )
    assert "failure group drift" in out and "kept 5, actual 1" in out
    call_command("check_counts", "--fix")
    call_command("check_counts")
    assert "match the ledger" in capsys.readouterr().out.splitlines()[-1]


def test_folding_keeps_every_sum():
    for i in range(5):
        make_receipt(session_key=MAIN, idempotency_key=f"f{i}", status="checkpoint_failed")
        make_receipt(session_key=MAIN, idempotency_key=f"f{i}", status="checkpoint_saved")
    before = kept()
    counts.fold_counts()
    assert kept() == before == {("main", "checkpoint", "checkpoint_saved"): 5}
    with connection.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM receipts_app_receiptcount")
        assert cur.fetchone()[0] == 1  # one row per key after a fold
