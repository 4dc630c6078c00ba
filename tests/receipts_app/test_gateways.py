"""The gateway namespace: overlapping session and idempotency keys of two gateways stay apart
in every read and write, and everything written without a gateway is ``local``'s."""

from __future__ import annotations

import pytest

from opensquilla_site.exceptions import ValidationFailed
from receipts_app import counts, ledger
from receipts_app.audit import Actor
from receipts_app.checkpoint import record_memory_checkpoint
from receipts_app.models import MemoryDurableReceipt
from receipts_app.requeue import Outcome, requeue_receipt
from receipts_app.selectors import (
    ReceiptFilter,
    current_checkpoint_coverage,
    filter_receipts,
    tab_counts,
)
from sessions_app import services as session_services
from sessions_app.gateways import (
    Gateway,
    GatewayNameError,
    current_gateway,
    ensure_gateway,
    using_gateway,
    validate_gateway_name,
)
from sessions_app.models import Session, TranscriptEntry
from tests.factories import make_receipt, make_session

from .requeue_support import failed_checkpoint, sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:default"


@pytest.fixture
def two_gateways():
    """``local`` and ``edge`` both hold a session under KEY, with different transcripts."""
    ensure_gateway("edge")
    local = make_session(KEY, messages=2)
    with using_gateway("edge"):
        edge = make_session(KEY, messages=3)
    return local, edge


def test_a_row_written_without_a_gateway_is_locals():
    session = make_session()
    receipt = make_receipt(session_key=session.session_key)
    assert current_gateway() == "local"
    assert session.gateway_id == receipt.gateway_id == "local"
    assert Gateway.objects.filter(name="local").exists()


def test_gateway_names_are_slugs():
    assert validate_gateway_name("host-2_a") == "host-2_a"
    for bad in ("", "Edge", "-edge", "a b", "x" * 65, "edge/1", "edge\n", "local\x00", None):
        with pytest.raises(GatewayNameError):
            validate_gateway_name(bad)


def test_one_session_key_in_two_gateways_is_two_sessions(two_gateways):
    local, edge = two_gateways
    assert local.pk != edge.pk and local.session_id != edge.session_id
    assert session_services.get_session(KEY).pk == local.pk
    with using_gateway("edge"):
        assert session_services.get_session(KEY).pk == edge.pk
        assert len(session_services.get_transcript(edge.session_id)) == 3
        with pytest.raises(ValueError, match="already exists"):
            session_services.create_session(KEY)
    assert len(session_services.get_transcript(local.session_id)) == 2
    assert TranscriptEntry.objects.filter(gateway_id="edge").count() == 3
    # Lists span every gateway when none is chosen, one when an edge chose it.
    assert Session.objects.filter(session_key=KEY).count() == 2
    with using_gateway("edge"):
        assert list(Session.objects.values_list("pk", flat=True)) == [edge.pk]


def test_reset_and_delete_touch_only_their_own_gateway(two_gateways):
    local, edge = two_gateways
    make_receipt(session_key=KEY, session_id=local.session_id, idempotency_key="k-local")
    with using_gateway("edge"):
        make_receipt(session_key=KEY, session_id=edge.session_id, idempotency_key="k-edge")
        reset = session_services.reset_session(KEY)
        assert reset.epoch == 1
    assert Session.objects.get(pk=local.pk).epoch == 0
    assert len(session_services.get_transcript(local.session_id)) == 2
    with using_gateway("edge"):
        assert session_services.delete_session(KEY) is True
    assert list(MemoryDurableReceipt.objects.values_list("idempotency_key", flat=True)) == [
        "k-local"
    ]
    assert session_services.get_session(KEY).pk == local.pk


def test_an_idempotency_key_is_unique_within_its_gateway_only():
    ensure_gateway("edge")
    mine = make_receipt(idempotency_key="same", status="checkpoint_saved")
    with using_gateway("edge"):
        theirs = make_receipt(idempotency_key="same", status="checkpoint_failed")
        again = make_receipt(idempotency_key="same", status="checkpoint_recovered")
    assert mine.receipt_id != theirs.receipt_id
    assert again.receipt_id == theirs.receipt_id
    assert MemoryDurableReceipt.objects.get(receipt_id=mine.receipt_id).status == "checkpoint_saved"
    assert ledger.list_memory_durable_receipts(idempotency_key="same")[0].pk == mine.pk
    with using_gateway("edge"):
        rows = ledger.list_memory_durable_receipts(idempotency_key="same")
        assert [r.status for r in rows] == ["checkpoint_recovered"]


def test_counts_and_the_receipt_filter_keep_gateways_apart():
    ensure_gateway("edge")
    make_receipt(status="checkpoint_failed")
    with using_gateway("edge"):
        make_receipt(status="checkpoint_failed")
        make_receipt(status="checkpoint_failed")
    per_gateway = {
        r.gateway_id: r.count for r in counts.receipt_counts() if r.status == "checkpoint_failed"
    }
    assert per_gateway == {"local": 1, "edge": 2}
    edge_only = ReceiptFilter.from_params({"gateway": "edge", "status": "checkpoint_failed"})
    assert filter_receipts(edge_only).count() == 2
    assert tab_counts(edge_only).total == 2
    everywhere = ReceiptFilter.from_params({"status": "checkpoint_failed"})
    assert filter_receipts(everywhere).count() == 3
    assert tab_counts(everywhere).total == 3
    assert counts.find_drift() == []
    with using_gateway("edge"):
        assert sum(r.count for r in counts.receipt_counts()) == 2
    with pytest.raises(ValidationFailed, match="gateway"):
        ReceiptFilter.from_params({"gateway": "Not A Slug"})


def test_a_checkpoint_covers_only_its_own_gateways_transcript(two_gateways, workspace):
    local, edge = two_gateways
    with using_gateway("edge"):
        saved = record_memory_checkpoint(KEY)
    assert saved.gateway_id == "edge" and saved.session_id == edge.session_id
    assert current_checkpoint_coverage(Session.objects.get(pk=edge.pk))[0].pk == saved.pk
    assert current_checkpoint_coverage(Session.objects.get(pk=local.pk))[0] is None


def test_a_requeue_fences_on_the_rows_own_gateway(
    two_gateways, sent, django_capture_on_commit_callbacks
):
    local, edge = two_gateways
    with using_gateway("edge"):
        row = failed_checkpoint(edge)
    # Acting as no gateway at all: the row's own gateway decides the live generation.
    with django_capture_on_commit_callbacks(execute=True):
        result = requeue_receipt(receipt_id=row.receipt_id, actor=Actor("alice", "console"))
    assert result.outcome is Outcome.REQUEUED, result.message
    [(name, args, kwargs, _id)] = sent
    assert name.endswith("checkpoint_session") and args == (KEY,)
    assert kwargs["gateway"] == "edge" and kwargs["requeue_of"] == row.receipt_id
