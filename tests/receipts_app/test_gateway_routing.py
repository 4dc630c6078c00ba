"""Work runs where its gateway lives: every task for a gateway's rows goes to that gateway's
queue, the outbox resends it there, a worker refuses the rows of a gateway it does not serve,
and the operator is told when a gateway's queue has no live worker.

Tasks run eagerly here (the process is the "worker"); the real-worker version, with two real
OpenSquilla 0.3.0 gateways, is tests/worker/test_gateway_routing.py.
"""

from __future__ import annotations

import pytest
from kombu.exceptions import OperationalError as BrokerDown

from opensquilla_site import timeutil
from opensquilla_site.celery import app as celery_app
from operations_app import heartbeats
from receipts_app import enqueue, repair, tasks
from receipts_app.audit import Actor
from receipts_app.models import MemoryDurableReceipt, OutboxMessage
from receipts_app.requeue import (
    create_requeue_plan,
    requeue_receipt,
    run_requeue_plan,
    start_requeue_plan,
    sweep_lost_work,
)
from sessions_app.gateways import REPAIRS_CONSOLE, Gateway, ensure_gateway, using_gateway
from tests.factories import make_session

from .requeue_support import failed_checkpoint, repair_row, sent_fixture  # noqa: F401

pytestmark = pytest.mark.django_db

ALICE = Actor("alice", "api")
KEY = "agent:main:webchat:default"


@pytest.fixture
def gateways():
    """``local``, ``a`` and ``b``, each with a session under the same key and a failed
    checkpoint of it."""
    rows = {}
    for name in ("local", "a", "b"):
        ensure_gateway(name)
        with using_gateway(name):
            rows[name] = failed_checkpoint(make_session(KEY, messages=2))
    return rows


def live_worker(name: str, *queues: str) -> None:
    """A worker that said, when it started, which queues it consumes (its heartbeat row)."""
    heartbeats.mark_started("worker", name, {"queues": list(queues)})


def _fresh(row: MemoryDurableReceipt) -> MemoryDurableReceipt:
    return MemoryDurableReceipt.objects.get(pk=row.pk)


@pytest.fixture
def eager(settings, monkeypatch, workspace):
    settings.CELERY_TASK_ALWAYS_EAGER = True
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    monkeypatch.setitem(celery_app.conf, "task_eager_propagates", True)
    return workspace


def _files(root) -> list:
    return sorted(p for p in root.rglob("*") if p.is_file())


# --- one queue per gateway ------------------------------------------------------------------


def test_each_requeue_goes_to_its_own_gateways_queue(
    gateways, sent, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        for name in ("local", "a", "b"):
            requeue_receipt(receipt_id=gateways[name].receipt_id, actor=ALICE)
    assert [kwargs.get("gateway") for _n, _a, kwargs, _id in sent] == [None, "a", "b"]
    assert sent.queues == ["", "gateway.a", "gateway.b"]  # "": the default queue
    # The outbox remembers where each went.
    assert {m.task_id: m.queue for m in OutboxMessage.objects.all()} == {
        task_id: queue for (_n, _a, _k, task_id), queue in zip(sent, sent.queues, strict=True)
    }


def test_a_repair_rows_requeue_goes_to_its_gateways_queue(sent, django_capture_on_commit_callbacks):
    ensure_gateway("b")
    with using_gateway("b"):
        row = repair_row("repair_abandoned")
    with django_capture_on_commit_callbacks(execute=True):
        requeue_receipt(receipt_id=row.receipt_id, actor=ALICE)
    [(name, args, kwargs, _id)] = sent
    assert name.endswith("repair_receipt") and args == (row.receipt_id,)
    assert kwargs == {"gateway": "b"} and sent.queues == ["gateway.b"]


def test_a_plan_over_three_gateways_queues_each_rows_work_to_its_own_gateway(
    gateways, sent, django_capture_on_commit_callbacks
):
    plan = create_requeue_plan(
        filters={"status": "checkpoint_failed"}, receipt_ids=None, actor=ALICE
    )
    with django_capture_on_commit_callbacks(execute=True):
        start_requeue_plan(plan_id=plan.plan_id, actor=ALICE)
    # The plan runner itself is central: the default queue.
    assert sent.queues == [""] and sent[0][0].endswith("run_requeue_plan")
    with django_capture_on_commit_callbacks(execute=True):
        run_requeue_plan(plan.plan_id)
    retakes = {
        kwargs["requeue_of"]: queue
        for (name, _a, kwargs, _id), queue in zip(sent, sent.queues, strict=True)
        if name.endswith("checkpoint_session")
    }
    assert retakes == {
        gateways["local"].receipt_id: "",
        gateways["a"].receipt_id: "gateway.a",
        gateways["b"].receipt_id: "gateway.b",
    }


def test_the_queue_prefix_is_a_setting(
    gateways, sent, settings, django_capture_on_commit_callbacks
):
    settings.OPENSQUILLA_GATEWAY_QUEUE_PREFIX = "edge:"
    with django_capture_on_commit_callbacks(execute=True):
        requeue_receipt(receipt_id=gateways["b"].receipt_id, actor=ALICE)
    assert sent.queues == ["edge:b"]


def test_a_resend_goes_to_the_queue_the_first_send_went_to(
    gateways, monkeypatch, django_capture_on_commit_callbacks
):
    def broker_down(*_args, **_kwargs):
        raise BrokerDown("Connection refused.")

    monkeypatch.setattr(enqueue, "_send", broker_down)
    with django_capture_on_commit_callbacks(execute=True):
        result = requeue_receipt(receipt_id=gateways["b"].receipt_id, actor=ALICE)
    kept = OutboxMessage.objects.get(task_id=result.task_id)
    assert (kept.queue, kept.sent_at) == ("gateway.b", None)

    resent: list[tuple[str, str]] = []
    monkeypatch.setattr(
        enqueue,
        "_send",
        lambda name, task_id, args, kwargs, *, queue="": resent.append((task_id, queue)),
    )
    # The stored queue is the one used, even once the routing would say otherwise.
    OutboxMessage.objects.filter(pk=kept.pk).update(queue="gateway.b-old-host")
    swept = sweep_lost_work(timeutil.now_ms())
    assert swept["outbox_resent"] == [result.task_id]
    assert resent == [(result.task_id, "gateway.b-old-host")]


def test_a_message_kept_before_queues_were_stored_is_resent_to_its_gateways_queue(
    gateways, monkeypatch
):
    OutboxMessage.objects.create(
        task_id="old-1",
        task="checkpoint_session",
        args=[KEY],
        kwargs={"requeue_of": gateways["b"].receipt_id, "gateway": "b"},
        sent_at=None,
    )
    resent: list[str] = []
    monkeypatch.setattr(
        enqueue,
        "_send",
        lambda *_a, queue="": resent.append(queue),  # noqa: ARG005
    )
    sweep_lost_work(timeutil.now_ms())
    assert resent == ["gateway.b"]


# --- a worker runs only the rows of the gateway it serves --------------------------------------


def test_a_requeued_checkpoint_of_another_gateway_is_refused_and_fails_saying_why(
    gateways, eager, django_capture_on_commit_callbacks
):
    # This process serves ``local`` (OPENSQUILLA_GATEWAY unset); the message reaches it anyway.
    row = gateways["b"]
    with django_capture_on_commit_callbacks(execute=True):
        requeue_receipt(receipt_id=row.receipt_id, actor=ALICE)
    failed = _fresh(row)
    assert failed.status == "checkpoint_failed"
    assert failed.reason.startswith("misrouted: requeued checkpoint")
    assert "belongs to gateway b" in failed.reason and "gateway.b" in failed.reason
    assert _files(eager) == []  # nothing written into this worker's workspace
    with using_gateway("b"):
        assert not MemoryDurableReceipt.objects.filter(status="checkpoint_saved").exists()


def test_the_worker_of_that_gateway_runs_it(
    gateways, eager, settings, django_capture_on_commit_callbacks
):
    settings.OPENSQUILLA_GATEWAY = "b"
    row = gateways["b"]
    with django_capture_on_commit_callbacks(execute=True):
        requeue_receipt(receipt_id=row.receipt_id, actor=ALICE)
    recovered = _fresh(row)
    assert recovered.status == "checkpoint_recovered"
    saved = MemoryDurableReceipt.objects.get(receipt_id=recovered.resolved_by_receipt_id)
    assert saved.gateway_id == "b" and (eager / str(saved.source_path)).is_file()
    # And it refuses local's.
    with django_capture_on_commit_callbacks(execute=True):
        requeue_receipt(receipt_id=gateways["local"].receipt_id, actor=ALICE)
    assert "belongs to gateway local" in str(_fresh(gateways["local"]).reason)


def test_checkpoints_flushes_repairs_and_ticks_of_another_gateway_are_refused(gateways, eager):
    result = tasks.checkpoint_session.delay(KEY, gateway="b").get()
    assert result["status"] == "refused" and "gateway b" in result["error"]
    result = tasks.flush_session.delay(KEY, gateway="b").get()
    assert result["status"] == "refused"
    with using_gateway("b"):
        pending = repair_row("repair_pending", attempt_count=0)
    result = tasks.repair_receipt.delay(pending.receipt_id, gateway="b").get()
    assert (result["status"], result["reason"]) == ("skipped", "misrouted")
    assert _fresh(pending).status == "repair_pending"  # still due, for b's own tick
    result = tasks.repair_tick.delay(gateway="b").get()
    assert result["status"] == "refused"
    assert _files(eager) == []
    with using_gateway("b"):
        assert not MemoryDurableReceipt.objects.filter(status="checkpoint_saved").exists()


# --- the repair tick: central, and one per gateway on its own worker ----------------------------


def test_the_central_tick_repairs_locals_rows_and_queues_each_live_gateways_own_tick(
    sent, monkeypatch, django_capture_on_commit_callbacks
):
    for name in ("a", "b"):
        ensure_gateway(name)
    # Their repairs were handed to this console (docs/MIRROR.md): its ticks run for them.
    Gateway.objects.filter(name__in=["a", "b"]).update(repairs=REPAIRS_CONSOLE)
    with using_gateway("b"):
        b_due = repair_row("repair_pending", attempt_count=0)
    local_due = repair_row("repair_pending", attempt_count=0)
    seen: list[str] = []
    monkeypatch.setattr(
        repair,
        "repair_durable_receipt_source",
        lambda row, **_kw: seen.append(row.receipt_id) or {"status": "repair_done"},
    )
    monkeypatch.setattr(repair, "memory_workspace_for_agent", lambda _agent: "/nonexistent")
    live_worker("celery@host-b", "gateway.b")  # b has a worker; a has none

    with django_capture_on_commit_callbacks(execute=True):
        result = tasks.repair_tick()
    assert seen == [local_due.receipt_id]  # b's row is b's worker's to repair
    assert result["gateway_ticks"] == ["b"]
    [(name, args, kwargs, _id)] = [m for m in sent if m[0].endswith("repair_tick")]
    assert kwargs == {"gateway": "b"} and sent.queues[-1] == "gateway.b"

    # b's tick is still in the outbox (its worker has not finished it): no second one.
    with django_capture_on_commit_callbacks(execute=True):
        assert tasks.repair_tick()["gateway_ticks"] == []

    # On b's worker, b's tick repairs b's rows only.
    seen.clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("django.conf.settings.OPENSQUILLA_GATEWAY", "b")
        result = tasks.repair_tick(gateway="b")
    assert seen == [b_due.receipt_id] and result["repair"]["gateway"] == "b"


# --- "no live worker" ---------------------------------------------------------------------------


def test_a_requeue_to_a_queue_no_live_worker_consumes_is_accepted_with_a_warning(
    gateways, sent, django_capture_on_commit_callbacks
):
    live_worker("celery@central", "celery")
    live_worker("celery@host-a", "gateway.a")
    heartbeats.mark_started("worker", "celery@host-b-gone", {"queues": ["gateway.b"]})
    heartbeats.record_heartbeat("worker", "celery@host-b-gone", state="stopped")
    with django_capture_on_commit_callbacks(execute=True):
        results = {
            name: requeue_receipt(receipt_id=gateways[name].receipt_id, actor=ALICE)
            for name in ("local", "a", "b")
        }
    assert {n: str(r.outcome) for n, r in results.items()} == dict.fromkeys(
        ("local", "a", "b"), "requeued"
    )
    assert results["local"].warning is None and results["a"].warning is None
    assert results["b"].warning == (
        "gateway b has no live worker on queue gateway.b: the work will wait until one starts"
    )
    assert len(sent) == 3  # accepted all the same: in the outbox and on b's queue


def test_a_silent_worker_does_not_count_as_live(gateways, settings):
    settings.OPENSQUILLA_HEARTBEAT_STALE_SECONDS = 60
    live_worker("celery@host-b", "gateway.b")
    from operations_app.models import Heartbeat

    Heartbeat.objects.filter(name="celery@host-b").update(seen_at=timeutil.now_ms() - 3_600_000)
    result = requeue_receipt(receipt_id=gateways["b"].receipt_id, actor=ALICE)
    assert result.warning is not None and "gateway b" in result.warning


def test_a_repair_pass_by_hand_repairs_only_the_served_gateways_rows(monkeypatch):
    # ``manage.py repair_once --agent main`` runs this pass in the calling process, whose
    # memory workspace is its own gateway's (local): b's due row is left for b's worker.
    ensure_gateway("b")
    with using_gateway("b"):
        repair_row("repair_pending", attempt_count=0)
    local_due = repair_row("repair_pending", attempt_count=0)
    seen: list[str] = []
    monkeypatch.setattr(
        repair,
        "repair_durable_receipt_source",
        lambda row, **_kw: seen.append(row.receipt_id) or {"status": "repair_done"},
    )
    monkeypatch.setattr(repair, "memory_workspace_for_agent", lambda _agent: "/nonexistent")
    repair.run_memory_repair_once("main", limit=5)
    assert seen == [local_due.receipt_id]
