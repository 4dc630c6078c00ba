"""The short SQLite write transaction of a single-row ledger write (prepared_sql.write_transaction):
all or nothing, and it joins a caller's transaction instead of committing it."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from receipts_app import ledger
from receipts_app.ledger import fastsql
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from tests.conftest import is_postgres
from tests.factories import make_receipt

pytestmark = [
    pytest.mark.django_db(transaction=True),  # real commits: the code under test opens them
    # On PostgreSQL a single-row write is one statement (write and audit together), so there
    # is no multi-statement transaction of ours to observe; this path is SQLite's.
    pytest.mark.skipif(is_postgres(), reason="SQLite's multi-statement write path"),
]


class AuditWriteFailed(RuntimeError):
    pass


def _status_change(row: MemoryDurableReceipt) -> MemoryDurableReceipt:
    return MemoryDurableReceipt(
        session_key=row.session_key,
        session_id=row.session_id,
        scope=row.scope,
        idempotency_key=row.idempotency_key,
        status="repair_failed",
    )


def test_a_write_whose_audit_row_fails_leaves_nothing_behind(monkeypatch):
    row = make_receipt(status="checkpoint_failed")

    def fail(*args, **kwargs):
        raise AuditWriteFailed

    monkeypatch.setattr(fastsql, "_sqlite_event", fail)
    with pytest.raises(AuditWriteFailed):
        ledger.upsert_memory_durable_receipt(_status_change(row))
    # the upsert statement ran, then its audit insert failed: the row is as it was
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "checkpoint_failed"
    assert not connection.connection.in_transaction
    with pytest.raises(AuditWriteFailed):
        ledger.update_memory_durable_receipt(row.receipt_id, status="acknowledged")
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "checkpoint_failed"
    assert not connection.connection.in_transaction


def test_inside_a_callers_transaction_the_write_is_rolled_back_with_it():
    row = make_receipt(status="checkpoint_failed")

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), transaction.atomic():
        ledger.upsert_memory_durable_receipt(_status_change(row))
        ledger.update_memory_durable_receipt(row.receipt_id, reason="noted")
        raise Abandon
    stored = MemoryDurableReceipt.objects.get(pk=row.pk)
    assert (stored.status, stored.reason) == ("checkpoint_failed", row.reason)
    assert not ReceiptEvent.objects.filter(receipt_id=row.receipt_id, to_status="repair_failed")


def test_a_committed_write_is_visible_with_its_audit_event():
    row = make_receipt(status="checkpoint_failed")
    ledger.upsert_memory_durable_receipt(_status_change(row))
    assert not connection.connection.in_transaction
    assert MemoryDurableReceipt.objects.get(pk=row.pk).status == "repair_failed"
    assert ReceiptEvent.objects.filter(
        receipt_id=row.receipt_id, from_status="checkpoint_failed", to_status="repair_failed"
    ).exists()
