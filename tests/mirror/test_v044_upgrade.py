"""A followed gateway upgraded to OpenSquilla 0.5.5 (migration V044 retires the flush and repair
pipelines): its history stays here, labelled retired, out of its backlog and at-risk counts,
never "gone upstream", and the raw-fallback archives it left undistilled are listed.

The upgrade is applied to the followed file by ``tests/mirror/v044.py`` (written from the
description of V044), between two passes of the follower, as a gateway restarted on 0.5.5
would do under a running mirror.
"""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from django.urls import reverse

from receipts_app import handover
from receipts_app.counts import per_status, receipt_counts
from receipts_app.gateways import fleet
from receipts_app.importer.schema import read_schema_version
from receipts_app.importer.service import import_opensquilla
from receipts_app.mirror.follower import Follower
from receipts_app.mirror.models import MirroredReceipt
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.statuses import AT_RISK_STATUSES, REPAIR_QUEUE_STATUSES, RETIRED_UPSTREAM
from sessions_app.gateways import Gateway, using_gateway
from tests.console.conftest import _client_for

from .opensquilla_source import FakeGateway
from .v044 import apply_v044

pytestmark = pytest.mark.django_db

KEY = "agent:main:webchat:default"
ARCHIVE = "memory/.raw_fallbacks/2026-09-01-agent-main-webchat-default-timeout-0123456789abcdef.md"
DISTILLED = (
    "memory/.raw_fallbacks/2026-08-01-agent-main-webchat-default-timeout-fedcba9876543210.md"
)
GIVEN_UP = (
    "memory/.raw_fallbacks/2026-08-15-agent-main-webchat-default-llm_error-00ff00ff00ff00ff.md"
)


@pytest.fixture
def upstream(tmp_path) -> FakeGateway:
    (tmp_path / "state").mkdir()
    gw = FakeGateway(tmp_path / "state" / "sessions.db")
    yield gw
    gw.close()


def _follower(gw: FakeGateway) -> Follower:
    return Follower(
        db_path=gw.path,
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="test-follower",
        gateway="c",
    )


def _ledger_before_upgrade(gw: FakeGateway) -> dict[str, dict]:
    """A 0.5.3 gateway's ledger with every kind of row V044 retires or keeps."""
    gw.add_session(KEY)
    gw.add_entry(KEY, "hello")
    rows = {
        "saved": gw.add_receipt(KEY, status="checkpoint_saved"),
        "failed": gw.add_receipt(KEY, status="checkpoint_failed", reason="disk full"),
        "preimage": gw.add_receipt(
            KEY,
            scope="preimage",
            status="preimage_saved",
            reason="preimage",
            target_path=ARCHIVE,
            idempotency_key="flush-receipt:preimage:1",
        ),
        "pending": gw.add_receipt(
            KEY,
            scope="repair",
            status="repair_pending",
            reason="provider_failed_archived",
            target_path=ARCHIVE,
            attempt_count=1,
            next_retry_at_ms=1,
            idempotency_key="flush-receipt:repair:1",
        ),
        "given_up": gw.add_receipt(
            KEY,
            scope="repair",
            status="repair_abandoned",
            reason="llm_error",
            target_path=GIVEN_UP,
            attempt_count=4,
            idempotency_key="flush-receipt:repair:2",
        ),
        "distilled": gw.add_receipt(
            KEY,
            scope="repair",
            status="repair_done",
            reason="ok_archive_only",
            target_path=DISTILLED,
            attempt_count=1,
            idempotency_key="flush-receipt:repair:3",
        ),
        "flushed": gw.add_receipt(
            KEY,
            scope="flush",
            status="flush_appended",
            target_path="memory/2026-09-01.md",
            idempotency_key="flush-receipt:flush:1",
        ),
    }
    return rows


def _counts(name: str) -> tuple[int, int]:
    mine = [r for r in receipt_counts() if r.gateway_id == name]
    at_risk = sum(per_status(mine, statuses=AT_RISK_STATUSES).values())
    backlog = sum(per_status(mine, statuses=REPAIR_QUEUE_STATUSES).values())
    return at_risk, backlog


def test_a_gateway_followed_through_its_upgrade_keeps_its_history_labelled_retired(upstream):
    rows = _ledger_before_upgrade(upstream)
    follower = _follower(upstream)
    assert follower.poll() == "synced"
    assert _counts("c") == (2, 1)  # checkpoint_failed + repair_abandoned; one repair queued

    apply_v044(upstream.path)
    assert read_schema_version(upstream.conn).ledger_retired
    follower.poll()
    follower.poll()

    with using_gateway("c"):
        here = {
            k: MemoryDurableReceipt.objects.here().get(receipt_id=v["receipt_id"])
            for k, v in rows.items()
        }
    # kept here, every one; the open ones moved out of the backlog and the at-risk count
    assert here["pending"].status == RETIRED_UPSTREAM
    assert here["given_up"].status == RETIRED_UPSTREAM
    assert here["preimage"].status == "preimage_saved"  # closed rows keep their status
    assert here["distilled"].status == "repair_done"
    assert here["failed"].status == "checkpoint_failed"  # V044 keeps checkpoint rows
    assert _counts("c") == (1, 0)
    gateway_row = next(g for g in fleet() if g["name"] == "c")
    assert gateway_row["at_risk"]["memory_at_risk"]["count"] == 1
    assert gateway_row["at_risk"]["repair_backlog"]["count"] == 0

    # labelled retired, not gone upstream
    marks = {m.idempotency_key: m for m in MirroredReceipt.objects.all()}
    for name in ("preimage", "pending", "given_up", "distilled", "flushed"):
        mark = marks[rows[name]["idempotency_key"]]
        assert mark.retired_at is not None and mark.gone_at is None, name
    for name in ("saved", "failed"):
        mark = marks[rows[name]["idempotency_key"]]
        assert mark.retired_at is None and mark.gone_at is None, name
    assert not ReceiptEvent.objects.filter(action="gone_upstream").exists()
    retired = ReceiptEvent.objects.filter(action="retired_upstream")
    assert retired.count() == 5
    event = retired.get(receipt_id=rows["pending"]["receipt_id"])
    assert (event.from_status, event.to_status) == ("repair_pending", RETIRED_UPSTREAM)
    # its history before the upgrade is still there
    assert ReceiptEvent.objects.filter(receipt_id=rows["pending"]["receipt_id"]).count() >= 1

    gateway = Gateway.objects.get(name="c")
    assert gateway.ledger_retired_at is not None
    assert "ledger retired" in gateway.schema_version
    assert handover.retired_counts() == {"c": 5}

    # the archives nothing upstream will distill any more: the queued one and the given-up
    # one, not the one a repair distilled before the upgrade
    [group] = handover.undistilled_archives("c")
    assert (group.gateway, group.agent_id) == ("c", "main")
    assert sorted(a.path for a in group.archives) == sorted([ARCHIVE, GIVEN_UP])
    first = next(a for a in group.archives if a.path == ARCHIVE)
    assert sorted(first.receipt_ids) == sorted(
        [rows["pending"]["receipt_id"], rows["preimage"]["receipt_id"]]
    )
    assert first.reason == "provider_failed_archived"

    # what an operator sees: the receipt labelled retired, the gateway's undistilled archives
    viewer = _client_for("viewer", "vera")
    page = viewer.get(
        reverse("receipts:detail", args=[rows["pending"]["receipt_id"]]) + "?gateway=c"
    ).content.decode()
    assert 'data-upstream="retired"' in page
    assert "Retired by the gateway's upgrade to 0.5.5+" in page and "gone upstream" not in page
    repairs_page = viewer.get(reverse("receipts:gateway_repairs", args=["c"])).content.decode()
    assert f'data-path="{ARCHIVE}"' in repairs_page and f'data-path="{GIVEN_UP}"' in repairs_page
    assert f'data-path="{DISTILLED}"' not in repairs_page

    # another pass changes nothing more
    follower.poll()
    assert ReceiptEvent.objects.filter(action="retired_upstream").count() == 5


def test_rows_marked_gone_before_the_upgrade_was_recognised_are_relabelled_retired(upstream):
    rows = _ledger_before_upgrade(upstream)
    follower = _follower(upstream)
    follower.poll()
    # an earlier version of this product saw the upgrade as deletes
    MirroredReceipt.objects.filter(idempotency_key=rows["pending"]["idempotency_key"]).update(
        gone_at=1
    )
    apply_v044(upstream.path)
    follower.poll()
    follower.poll()
    mark = MirroredReceipt.objects.get(idempotency_key=rows["pending"]["idempotency_key"])
    assert mark.retired_at is not None and mark.gone_at is None


def test_a_deleted_session_is_still_gone_upstream_after_the_upgrade(upstream):
    rows = _ledger_before_upgrade(upstream)
    follower = _follower(upstream)
    follower.poll()
    apply_v044(upstream.path)
    upstream.delete_session(KEY)
    follower.poll()
    follower.poll()
    failed = MirroredReceipt.objects.get(idempotency_key=rows["failed"]["idempotency_key"])
    assert failed.gone_at is not None and failed.retired_at is None


def test_the_0_3_0_golden_ledger_upgraded_by_v044_reads_retired_and_imports(golden_dir, tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    for part in golden_dir.joinpath("opensquilla-0.3.0").glob("sessions.db*"):
        shutil.copy(part, state / part.name)
    db = state / "sessions.db"
    before = sqlite3.connect(db)
    assert not read_schema_version(before).ledger_retired
    before.close()
    apply_v044(db)
    conn = sqlite3.connect(db)
    schema = read_schema_version(conn)
    scopes = {r[0] for r in conn.execute("SELECT DISTINCT scope FROM memory_durable_receipts")}
    conn.close()
    assert schema.ledger_retired and scopes == {"checkpoint"}
    report = import_opensquilla(db_path=db, workspace=None, gateway="golden")
    assert report.source_schema.endswith("ledger retired (V044)")
    assert Gateway.objects.get(name="golden").ledger_retired_at is not None
    assert MemoryDurableReceipt.objects.filter(gateway_id="golden").count() == 11


def test_handed_over_its_undistilled_archives_become_repairs_of_ours(
    upstream, tmp_path, monkeypatch
):
    """After the upgrade nothing upstream distills an archive; once an admin hands the
    gateway's repairs to this console, its worker imports each as a legacy row of ours (a
    retired row naming the archive does not count as a reference) and the list shows it
    queued here."""
    from receipts_app import repair
    from receipts_app.audit import Actor

    _ledger_before_upgrade(upstream)
    follower = _follower(upstream)
    follower.poll()
    apply_v044(upstream.path)
    follower.poll()
    follower.poll()
    memory = tmp_path / "workspace"
    raw = memory / "memory" / ".raw_fallbacks"
    raw.mkdir(parents=True)
    (memory / ARCHIVE).write_text("# Raw flush (timeout)\n\nuser: remember this\n")
    monkeypatch.setattr(repair, "memory_workspace_for_agent", lambda _agent: memory)
    monkeypatch.setattr(
        repair, "repair_durable_receipt_source", lambda row, **_kw: {"status": "skipped"}
    )
    monkeypatch.setattr("django.conf.settings.OPENSQUILLA_GATEWAY", "c")

    assert repair.run_gateway_repair_tick("c")["skipped"] == "repairs_are_the_gateways_own"
    assert not MemoryDurableReceipt.objects.filter(
        gateway_id="c", idempotency_key__startswith="repair-legacy-raw:"
    ).exists()

    handover.set_repairs("c", "console", actor=Actor("ada", "console"))
    repair.run_gateway_repair_tick("c")
    [legacy] = MemoryDurableReceipt.objects.filter(
        gateway_id="c", idempotency_key__startswith="repair-legacy-raw:"
    )
    assert (legacy.source_path, legacy.status) == (ARCHIVE, "repair_pending")
    [group] = handover.undistilled_archives("c")
    queued = {a.path: a.queued_here for a in group.archives}
    assert queued == {ARCHIVE: "repair_pending", GIVEN_UP: ""}
