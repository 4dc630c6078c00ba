"""Ledger rules beyond the seed: fence, cascades, ordering, literal prefixes, bad input."""

from __future__ import annotations

import pytest
from django.db import IntegrityError

from receipts_app import ledger
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from sessions_app import services
from tests.factories import make_receipt, make_session

pytestmark = pytest.mark.django_db


def _receipt(**fields):
    values = {
        "session_key": "agent:main:webchat:abc",
        "session_id": "session-1",
        "scope": "checkpoint",
        "idempotency_key": "k1",
        "status": "checkpoint_saved",
    }
    values.update(fields)
    return MemoryDurableReceipt(**values)


class TestGenerationFence:
    def test_fenced_write_for_live_generation_succeeds(self):
        session = make_session("agent:main:webchat:live")
        row = ledger.upsert_memory_durable_receipt(
            _receipt(session_key=session.session_key, session_id=session.session_id),
            expected_session_id=session.session_id,
        )
        assert row.session_id == session.session_id

    def test_mismatched_payload_is_refused(self):
        session = make_session("agent:main:webchat:live")
        with pytest.raises(KeyError, match="Session generation changed"):
            ledger.upsert_memory_durable_receipt(
                _receipt(session_key=session.session_key, session_id="other"),
                expected_session_id=session.session_id,
            )
        assert not MemoryDurableReceipt.objects.exists()

    def test_deleted_session_is_never_recreated_by_a_fenced_write(self):
        session = make_session("agent:main:webchat:gone")
        services.delete_session(session.session_key)
        with pytest.raises(KeyError, match="Session generation changed"):
            ledger.upsert_memory_durable_receipt(
                _receipt(session_key=session.session_key, session_id=session.session_id),
                expected_session_id=session.session_id,
            )
        assert not MemoryDurableReceipt.objects.exists()

    def test_reused_key_after_delete_and_recreate_fences_the_old_generation(self):
        old = make_session("agent:main:webchat:reused")
        services.delete_session(old.session_key)
        new = services.create_session(old.session_key)
        assert new.session_id != old.session_id and new.epoch == 0
        with pytest.raises(KeyError):
            ledger.upsert_memory_durable_receipt(
                _receipt(session_key=old.session_key, session_id=old.session_id),
                expected_session_id=old.session_id,
            )

    def test_reset_fences_writes_of_the_previous_generation(self):
        session = make_session("agent:main:webchat:reset")
        services.reset_session(session.session_key)
        with pytest.raises(KeyError):
            ledger.upsert_memory_durable_receipt(
                _receipt(session_key=session.session_key, session_id=session.session_id),
                expected_session_id=session.session_id,
            )

    def test_unfenced_write_needs_no_session(self):
        row = ledger.upsert_memory_durable_receipt(_receipt(session_key="webchat:default"))
        assert row.session_key == "agent:main:webchat:default"
        assert row.agent_id == "main"


class TestCascades:
    def test_delete_removes_receipts_of_every_generation_and_keeps_the_audit(self):
        session = make_session("agent:main:webchat:c", messages=1)
        make_receipt(session_key=session.session_key, session_id=session.session_id)
        reset = services.reset_session(session.session_key)
        make_receipt(session_key=session.session_key, session_id=reset.session_id)
        other = make_receipt(session_key="agent:main:webchat:other")

        assert services.delete_session("agent:main:webchat:c") is True

        assert list(MemoryDurableReceipt.objects.values_list("receipt_id", flat=True)) == [
            other.receipt_id
        ]
        assert ReceiptEvent.objects.filter(action="purged").count() == 2
        assert services.delete_session("agent:main:webchat:c") is False

    def test_reset_keeps_receipts_and_rotates_the_generation(self):
        session = make_session("agent:main:webchat:r", messages=2)
        kept = make_receipt(session_key=session.session_key, session_id=session.session_id)
        reset = services.reset_session(session.session_key)
        assert reset.session_id != session.session_id
        assert reset.epoch == session.epoch + 1
        assert services.get_transcript(reset.session_id) == []
        assert services.get_transcript(session.session_id) == []
        assert MemoryDurableReceipt.objects.get(receipt_id=kept.receipt_id).session_id == (
            session.session_id
        )

    def test_receipts_of_keys_without_a_session_survive_other_deletes(self):
        legacy = make_receipt(session_key="agent:main:memory-repair:legacy-raw")
        make_session("agent:main:webchat:x")
        services.delete_session("agent:main:webchat:x")
        assert MemoryDurableReceipt.objects.filter(receipt_id=legacy.receipt_id).exists()


class TestUpsertAndUpdate:
    def test_conflict_keeps_identity_and_records_the_status_change(self):
        first = ledger.upsert_memory_durable_receipt(
            _receipt(receipt_id="a", status="checkpoint_failed", created_at=5)
        )
        second = ledger.upsert_memory_durable_receipt(
            _receipt(receipt_id="b", status="checkpoint_saved", created_at=9)
        )
        assert (second.receipt_id, second.created_at) == ("a", 5)
        assert second.updated_at >= first.updated_at
        event = ReceiptEvent.objects.get(receipt_id="a", action="status_change")
        assert (event.from_status, event.to_status) == ("checkpoint_failed", "checkpoint_saved")

    def test_receipt_id_collision_under_another_key_is_an_integrity_error(self):
        ledger.upsert_memory_durable_receipt(_receipt(receipt_id="same", idempotency_key="k1"))
        with pytest.raises(IntegrityError):
            ledger.upsert_memory_durable_receipt(_receipt(receipt_id="same", idempotency_key="k2"))

    def test_upsert_ignores_callers_updated_at_but_update_honours_it(self):
        row = ledger.upsert_memory_durable_receipt(_receipt(updated_at=1))
        assert row.updated_at > 1
        backdated = ledger.update_memory_durable_receipt(row.receipt_id, updated_at=7)
        assert backdated.updated_at == 7

    def test_update_rejects_unknown_fields_sorted_before_touching_the_row(self):
        row = ledger.upsert_memory_durable_receipt(_receipt())
        with pytest.raises(ValueError, match="Unknown memory durable receipt fields: a, z"):
            ledger.update_memory_durable_receipt(row.receipt_id, z=1, a=2, status="x")
        assert MemoryDurableReceipt.objects.get(receipt_id=row.receipt_id).status == (
            "checkpoint_saved"
        )

    def test_update_cannot_change_receipt_id_or_created_at(self):
        row = ledger.upsert_memory_durable_receipt(_receipt())
        for field in ("receipt_id", "created_at"):
            with pytest.raises(ValueError):
                ledger.update_memory_durable_receipt(row.receipt_id, **{field: "x"})

    def test_missing_idempotency_key_is_refused(self):
        with pytest.raises(ValueError, match="idempotency_key"):
            ledger.upsert_memory_durable_receipt(_receipt(idempotency_key=""))

    def test_bulk_upsert_returns_stored_rows_in_input_order(self):
        existing = ledger.upsert_memory_durable_receipt(_receipt(receipt_id="old"))
        rows = ledger.bulk_upsert_memory_durable_receipts(
            [
                _receipt(receipt_id="n1", idempotency_key="k9"),
                _receipt(receipt_id="n2", idempotency_key="k1", status="checkpoint_failed"),
            ]
        )
        assert [r.receipt_id for r in rows] == ["n1", existing.receipt_id]
        assert rows[1].status == "checkpoint_failed"


class TestReads:
    def test_list_orders_oldest_first_with_insertion_order_as_tie_break(self):
        for name in ("c", "a", "b"):
            ledger.upsert_memory_durable_receipt(
                _receipt(receipt_id=name, idempotency_key=name, created_at=100)
            )
        rows = ledger.list_memory_durable_receipts(session_key="agent:main:webchat:abc")
        assert [r.receipt_id for r in rows] == ["c", "a", "b"]

    def test_limit_zero_returns_nothing_and_negative_returns_everything(self):
        for n in range(3):
            ledger.upsert_memory_durable_receipt(
                _receipt(receipt_id=f"r{n}", idempotency_key=f"k{n}")
            )
        assert ledger.list_memory_durable_receipts(limit=0) == []
        assert len(ledger.list_memory_durable_receipts(limit=-1)) == 3
        assert len(ledger.list_memory_durable_receipts(limit=2)) == 2

    def test_repair_queue_order_and_due_rule(self):
        def pending(rid, next_retry, created):
            ledger.upsert_memory_durable_receipt(
                _receipt(
                    receipt_id=rid,
                    idempotency_key=rid,
                    scope="repair",
                    status="repair_pending",
                    next_retry_at_ms=next_retry,
                    created_at=created,
                )
            )

        pending("later", 500, 1)
        pending("null-new", None, 9)
        pending("soon", 100, 5)
        pending("null-old", None, 2)
        pending("future", 10_000, 0)
        rows = ledger.list_memory_repair_receipts(limit=10, due_before_ms=1000)
        assert [r.receipt_id for r in rows] == ["null-old", "null-new", "soon", "later"]

    @pytest.mark.parametrize(
        ("prefix", "expected"),
        [
            ("agent:op_:", ["underscore"]),
            ("agent:op%:", ["percent"]),
            ("agent:Ops:", []),
            ("agent:ops:", ["lower"]),
        ],
    )
    def test_prefix_matching_is_literal_and_case_sensitive(self, prefix, expected):
        for rid, key in (
            ("underscore", "agent:op_:x"),
            ("percent", "subagent:x"),
            ("lower", "agent:ops:x"),
            ("opx", "agent:opx:x"),
        ):
            ledger.upsert_memory_durable_receipt(
                _receipt(
                    receipt_id=rid, idempotency_key=rid, scope="repair", status="repair_pending"
                )
            )
            # Stored raw so the prefix test sees literal characters, not canonical forms.
            MemoryDurableReceipt.objects.filter(receipt_id=rid).update(session_key=key)
        MemoryDurableReceipt.objects.filter(receipt_id="percent").update(session_key="agent:op%:x")
        rows = ledger.list_memory_repair_receipts(limit=10, session_key_prefix=prefix)
        assert [r.receipt_id for r in rows] == expected
        assert ledger.memory_durable_receipt_exists_for_path("none") is False

    def test_recent_is_newest_first(self):
        for n in range(3):
            ledger.upsert_memory_durable_receipt(
                _receipt(receipt_id=f"r{n}", idempotency_key=f"k{n}", created_at=n)
            )
        assert [r.receipt_id for r in ledger.list_recent_memory_durable_receipts(limit=2)] == [
            "r2",
            "r1",
        ]
        assert ledger.list_recent_memory_durable_receipts(limit=0) == []

    def test_exists_for_path_checks_source_and_target(self):
        ledger.upsert_memory_durable_receipt(_receipt(target_path="memory/.raw_fallbacks/a.md"))
        assert ledger.memory_durable_receipt_exists_for_path("memory/.raw_fallbacks/a.md")
        assert not ledger.memory_durable_receipt_exists_for_path(
            "memory/.raw_fallbacks/a.md", session_key_prefix="agent:ops:"
        )


class TestClaims:
    def test_claim_passes_once_and_only_when_due(self):
        ledger.upsert_memory_durable_receipt(
            _receipt(receipt_id="q", scope="repair", status="repair_pending", next_retry_at_ms=50)
        )
        assert ledger.claim_memory_repair_receipt("q", now_ms=10) is None
        claimed = ledger.claim_memory_repair_receipt("q", now_ms=60)
        assert claimed is not None and claimed.status == "repair_running"
        assert claimed.updated_at == 60 and claimed.attempt_count == 0
        assert ledger.claim_memory_repair_receipt("q", now_ms=70) is None
        assert ledger.claim_memory_repair_receipt("missing", now_ms=70) is None

    def test_stale_claims_return_to_the_queue(self):
        ledger.upsert_memory_durable_receipt(
            _receipt(receipt_id="s", scope="repair", status="repair_pending", attempt_count=2)
        )
        ledger.claim_memory_repair_receipt("s", now_ms=1_000)
        moved = ledger.recover_stale_memory_repair_claims(
            stale_before_ms=1_000, next_retry_at_ms=2_000, updated_at_ms=1_500
        )
        row = MemoryDurableReceipt.objects.get(receipt_id="s")
        assert moved == 1
        assert (row.status, row.reason, row.next_retry_at_ms, row.attempt_count) == (
            "repair_pending",
            "stale_repair_claim",
            2_000,
            2,
        )
        assert (
            ledger.recover_stale_memory_repair_claims(
                stale_before_ms=1_000, next_retry_at_ms=2_000, updated_at_ms=1_500
            )
            == 0
        )


class TestFastPaths:
    """The prebuilt-SQL paths return exactly what the ORM would."""

    def test_exact_coverage_lookup_matches_the_orm(self):
        for n in range(6):
            ledger.upsert_memory_durable_receipt(
                _receipt(
                    receipt_id=f"c{n}",
                    idempotency_key=f"c{n}",
                    coverage_turn_id="through-9" if n % 2 else "through-8",
                    coverage_hash="h",
                    coverage_entry_count=3,
                    created_at=100 - n,
                )
            )
        filters = {
            "session_key": "agent:main:webchat:abc",
            "session_id": "session-1",
            "scope": "checkpoint",
            "status": "checkpoint_saved",
            "coverage_turn_id": "through-9",
            "coverage_hash": "h",
            "coverage_entry_count": 3,
        }
        expected = list(
            MemoryDurableReceipt.objects.filter(**filters).order_by("created_at", "id")[:2]
        )
        got = ledger.list_memory_durable_receipts(**filters, limit=2)
        assert [r.receipt_id for r in got] == [r.receipt_id for r in expected] == ["c5", "c3"]
        assert [r.created_at for r in got] == [95, 97]
        assert got[0].coverage_entry_count == 3 and got[0].agent_id == "main"
        assert ledger.list_memory_durable_receipts(**filters, limit=0) == []
        assert len(ledger.list_memory_durable_receipts(**filters, limit=-1)) == 3

    def test_bulk_upsert_with_all_null_optional_columns(self):
        rows = ledger.bulk_upsert_memory_durable_receipts(
            [_receipt(receipt_id=f"b{n}", idempotency_key=f"b{n}") for n in range(3)]
        )
        assert [r.receipt_id for r in rows] == ["b0", "b1", "b2"]
        stored = MemoryDurableReceipt.objects.get(receipt_id="b1")
        assert stored.turn_id is None and stored.coverage_entry_count is None
        assert stored.next_retry_at_ms is None and stored.reason is None
