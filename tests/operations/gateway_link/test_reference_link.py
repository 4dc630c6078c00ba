"""The whole gateway link against a real OpenSquilla 0.3.0 gateway (the reference venv's).

Its own gateway (the fixtures of test_reference_gateway.py, started again for this module):
token mode, a free loopback port, its own home folder. A failing checkpoint and a due repair
are written through its own storage; the console follows its sessions.db (the mirror) and an
operator acknowledges the failed checkpoint here. Then the beat task reads the gateway's own
verdict, the pages show it beside ours with the gap, and an admin asks the gateway to run its
due repairs.
"""

from __future__ import annotations

import html
import re

import pytest
from django.test import Client
from django.urls import reverse

from operations_app.models import GatewayLink, GatewayMemoryVerdict
from operations_app.tasks import read_gateway_links
from receipts_app.audit import Actor
from receipts_app.mirror.follower import Follower
from receipts_app.models import MemoryDurableReceipt, ReceiptEvent
from receipts_app.requeue import acknowledge_receipt
from sessions_app.gateways import Gateway, ensure_gateway
from tests.console.conftest import _client_for

from .test_link_wiring import overview_panel
from .test_reference_gateway import TOKEN, gateway, written  # noqa: F401 - fixtures

pytestmark = [pytest.mark.reference, pytest.mark.django_db]

NAME = "ref"


def test_the_console_shows_the_real_gateways_view_the_gap_and_the_repair_run(
    gateway,  # noqa: F811 - the fixture imported above
    written,  # noqa: F811
    read_token,
    tmp_path,
    settings,
    monkeypatch,
    repairs_inline,
    django_capture_on_commit_callbacks,
) -> None:
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    # Follow the live gateway's ledger, as the mirror does (read-only).
    Follower(
        db_path=gateway.state / "sessions.db",
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="reference-link",
        gateway=NAME,
    ).poll()
    failed = MemoryDurableReceipt.objects.get(receipt_id=written["failed"])
    assert (failed.gateway_id, failed.status) == (NAME, "checkpoint_failed")
    acknowledge_receipt(
        receipt_id=written["failed"], actor=Actor("alice", "console"), reason="disk replaced"
    )
    ensure_gateway(NAME)
    Gateway.objects.filter(name=NAME).update(rpc_address=f"ws://{gateway.address}/ws")
    monkeypatch.setenv("OPENSQUILLA_GATEWAY_TOKEN_REF", TOKEN)

    assert read_gateway_links() == {NAME: "ok"}

    link = GatewayLink.objects.get(gateway_id=NAME)
    assert (link.server_version, link.protocol, link.scopes) == ("0.3.0", 3, None)
    assert link.can_run_repairs  # it lists memory.repair.run; 0.3.0 does not name scopes
    verdict = GatewayMemoryVerdict.objects.get(gateway_id=NAME, agent_id="main")
    # The gateway still counts the checkpoint acknowledged here, and its queued repair.
    assert (verdict.memory_safety, verdict.repair_backlog_count) == ("error", 1)

    operator = _client_for("operator", "otto")
    page = overview_panel(operator)
    assert "gateway says: error, 1 repair queued, 0 pending repairs" in page
    assert "here: 1 acknowledged by an operator" in page
    assert "OpenSquilla 0.3.0" in page
    gap_url = html.unescape(re.search(r'class="gap-link" href="([^"]+)"', page).group(1))
    assert [r.receipt_id for r in operator.get(gap_url).context["rows"]] == [written["failed"]]
    text = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {read_token}").content
    assert b'opensquilla_gateway_memory_gap{agent="main",gateway="ref"} 1.0' in text

    admin = _client_for("admin", "ada")
    agent_url = reverse("agents:detail", args=["main"]) + f"?gateway={NAME}"
    agent_page = admin.get(agent_url).content.decode()
    assert "gateway says: error, 1 repair queued" in agent_page
    assert 'data-action="gateway-repair-run"' in agent_page

    # The page queues the run; the worker (here, inline) asks the gateway.
    with django_capture_on_commit_callbacks(execute=True):
        ran = admin.post(
            reverse("agents:gateway_repairs", args=["main"]) + f"?gateway={NAME}",
            {"confirm": "yes"},
            follow=True,
        )

    assert "queued; the outcome appears in the audit trail" in ran.content.decode()
    run = ReceiptEvent.objects.filter(receipt_id="", action="gateway_repair_run").latest("id")
    assert (run.outcome, run.details["count"], run.details["agent"]) == ("ok", 1, "main")
    event = ReceiptEvent.objects.get(receipt_id=written["repair"], action="gateway_repair_run")
    # No flush model is configured on the gateway: it archives again and backs off.
    assert (event.actor, event.outcome) == ("ada", "failed_retryable")
    assert event.details["result"]["receiptId"] == written["repair"]
