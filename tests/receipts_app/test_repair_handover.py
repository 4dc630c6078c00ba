"""Nothing done to a gateway unasked: this console's periodic repair pass, its stale-claim
recovery and its import of raw-fallback archives touch a gateway's workspace and rows only once
that gateway's repairs were handed to this console (``local``'s are by default).
"""

from __future__ import annotations

import pytest

from receipts_app import handover, repair, tasks
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from sessions_app.gateways import REPAIRS_CONSOLE, Gateway, ensure_gateway, using_gateway

from .requeue_support import repair_row, sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

ADA = Actor("ada", "console")


@pytest.fixture
def repairs_seen(monkeypatch) -> list[str]:
    seen: list[str] = []
    monkeypatch.setattr(
        repair,
        "repair_durable_receipt_source",
        lambda row, **_kw: seen.append(row.receipt_id) or {"status": "repair_done"},
    )
    monkeypatch.setattr(repair, "memory_workspace_for_agent", lambda _agent: "/nonexistent")
    return seen


def _on_worker_of(monkeypatch, name: str) -> None:
    monkeypatch.setattr("django.conf.settings.OPENSQUILLA_GATEWAY", name)


def test_a_gateway_is_its_own_repairer_until_handed_over_and_local_is_ours():
    ensure_gateway("b")
    assert Gateway.objects.get(name="b").repairs_label == "the gateway's own"
    assert ensure_gateway("local").repairs_label == "this console"


def test_no_tick_is_queued_for_a_gateway_that_repairs_its_own_rows(
    sent, repairs_seen, django_capture_on_commit_callbacks
):
    ensure_gateway("b")
    with django_capture_on_commit_callbacks(execute=True):
        result = tasks.repair_tick()
    assert result["gateway_ticks"] == []
    assert not [m for m in sent if m[0].endswith("repair_tick")]


def test_its_tick_reaching_its_worker_repairs_nothing(monkeypatch, repairs_seen):
    ensure_gateway("b")
    with using_gateway("b"):
        due = repair_row("repair_pending", attempt_count=1)
    _on_worker_of(monkeypatch, "b")
    result = tasks.repair_tick(gateway="b")
    assert repairs_seen == []
    assert result["repair"]["skipped"] == "repairs_are_the_gateways_own"
    assert MemoryDurableReceipt.objects.get(pk=due.pk).status == "repair_pending"

    handover.set_repairs("b", "console", actor=ADA)
    result = tasks.repair_tick(gateway="b")
    assert repairs_seen == [due.receipt_id]


def test_the_central_tick_leaves_another_gateways_running_repair_alone():
    ensure_gateway("b")
    with using_gateway("b"):
        theirs = repair_row("repair_running", updated_at=1)
    ours = repair_row("repair_running", updated_at=1)
    assert repair.recover_stale_repair_claims(now_ms=10**13) == 1
    assert MemoryDurableReceipt.objects.get(pk=theirs.pk).status == "repair_running"
    assert MemoryDurableReceipt.objects.get(pk=ours.pk).status == "repair_pending"


def test_archives_become_rows_of_ours_only_under_the_handover(monkeypatch, tmp_path):
    ensure_gateway("b")
    raw = tmp_path / "memory" / ".raw_fallbacks"
    raw.mkdir(parents=True)
    (raw / "2026-09-01-agent-main-webchat-s1-timeout-0123456789abcdef.md").write_text(
        "# Raw flush (timeout)\n\nuser: hello\n"
    )
    monkeypatch.setattr(repair, "memory_workspace_for_agent", lambda _agent: tmp_path)
    _on_worker_of(monkeypatch, "b")
    repair.run_memory_repair_once("main", limit=0)
    assert not MemoryDurableReceipt.objects.filter(gateway_id="b").exists()

    Gateway.objects.filter(name="b").update(repairs=REPAIRS_CONSOLE)
    repair.run_memory_repair_once("main", limit=0)
    [row] = MemoryDurableReceipt.objects.filter(gateway_id="b")
    assert (row.status, row.idempotency_key.startswith("repair-legacy-raw:main:")) == (
        "repair_pending",
        True,
    )


def test_the_handover_is_recorded_and_checked():
    ensure_gateway("b")
    handover.set_repairs("b", "console", actor=ADA, reason="its repair loop is off")
    assert Gateway.objects.get(name="b").repairs_here
    handover.set_repairs("b", "gateway", actor=ADA)
    assert not Gateway.objects.get(name="b").repairs_here
    events = list(ReceiptEvent.objects.filter(action="repairs_handover").order_by("id"))
    assert [(e.actor, e.surface, e.outcome, e.gateway_id) for e in events] == [
        ("ada", "console", "console", "b"),
        ("ada", "console", "gateway", "b"),
    ]
    assert events[0].details == {"gateway": "b", "from": "the gateway's own", "to": "this console"}
    assert events[0].reason == "its repair loop is off"
    with pytest.raises(handover.HandoverError):
        handover.set_repairs("b", "everyone", actor=ADA)
    with pytest.raises(KeyError):
        handover.set_repairs("nope", "console", actor=ADA)


def test_an_operator_running_repair_once_is_asking(monkeypatch, repairs_seen, tmp_path):
    """``manage.py repair_once`` on b's host repairs b's due rows though b repairs its own:
    an operator asked. Its archives still wait for the handover."""
    from io import StringIO

    from django.core.management import call_command

    ensure_gateway("b")
    with using_gateway("b"):
        due = repair_row("repair_pending", attempt_count=1)
    raw = tmp_path / "memory" / ".raw_fallbacks"
    raw.mkdir(parents=True)
    (raw / "2026-09-01-agent-main-webchat-s1-timeout-0123456789abcdef.md").write_text("user: hi\n")
    monkeypatch.setattr(repair, "memory_workspace_for_agent", lambda _agent: tmp_path)
    _on_worker_of(monkeypatch, "b")
    call_command("repair_once", "--json", stdout=StringIO())
    assert repairs_seen == [due.receipt_id]
    assert not MemoryDurableReceipt.objects.filter(
        gateway_id="b", idempotency_key__startswith="repair-legacy-raw:"
    ).exists()
