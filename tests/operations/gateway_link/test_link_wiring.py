"""The gateway link wired in: configuration, the beat task, the pages, the gap, /metrics,
alerts and the admin's repair run, against the scripted fake gateway (fake_gateway.py).

The console's own ledger comes from a mirrored gateway database (tests/mirror's stand-in), so
the gap is the real one: receipts the gateway still counts that an operator resolved here.
"""

from __future__ import annotations

import html
import re
import socket
from io import StringIO
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from operations_app.alerts.conditions import Snapshot, firing_subjects
from operations_app.gateway_link.config import LinkConfigError, parse_links
from operations_app.gateway_link.states import reachability
from operations_app.models import AlertRule, GatewayLink, GatewayMemoryVerdict
from operations_app.tasks import read_gateway_links
from receipts_app.audit import Actor
from receipts_app.mirror.follower import Follower
from receipts_app.models import ReceiptEvent
from receipts_app.requeue import acknowledge_receipt
from sessions_app.gateways import Gateway, ensure_gateway
from tests.console.conftest import _client_for
from tests.mirror.opensquilla_source import FakeGateway as GatewayFile

from .fake_gateway import Script, status_answer

pytestmark = pytest.mark.django_db

NAME = "gw-a"
KEY = "agent:main:webchat:link"
TOKEN_ENV = "OPENSQUILLA_GATEWAY_TOKEN_GW_A"


@pytest.fixture
def ledger(tmp_path, settings) -> dict[str, Any]:
    """The gateway's sessions.db, mirrored here as gateway gw-a, with one failed checkpoint
    an operator acknowledged here (the gap) and one still failing on both sides."""
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    (tmp_path / "state").mkdir()
    db = GatewayFile(tmp_path / "state" / "sessions.db")
    db.add_session(KEY)
    db.add_entry(KEY, "hi")
    acked = db.add_receipt(KEY, status="checkpoint_failed", reason="disk full")
    failing = db.add_receipt(KEY, status="checkpoint_failed", reason="disk full again")
    follower = Follower(
        db_path=db.path,
        workspace=None,
        checkpoint_root=None,
        memory_template=None,
        interval=0.1,
        owner="link-test",
        gateway=NAME,
    )
    follower.poll()
    acknowledge_receipt(
        receipt_id=acked["receipt_id"], actor=Actor("alice", "console"), reason="known outage"
    )
    yield {"acked": acked["receipt_id"], "failing": failing["receipt_id"], "db": db}
    db.close()


def link(address: str, **fields: Any) -> Gateway:
    gateway = ensure_gateway(NAME)
    Gateway.objects.filter(name=NAME).update(rpc_address=address, **fields)
    gateway.refresh_from_db()
    return gateway


@pytest.fixture
def operator() -> Client:
    return _client_for("operator", "otto")


@pytest.fixture
def admin() -> Client:
    return _client_for("admin", "ada")


def overview_panel(client: Client) -> str:
    """The overview's gateway panel as the browser gets it: the overview names the panel's
    URL (loaded once the page has rendered), and that URL answers with the panel."""
    overview = client.get(reverse("receipts:overview"))
    assert overview.status_code == 200
    url = re.search(r'class="gateway-link-slot" hx-get="([^"]+)"', overview.content.decode()).group(
        1
    )
    panel = client.get(html.unescape(url), HTTP_HX_REQUEST="true")
    assert panel.status_code == 200
    return panel.content.decode()


def test_the_beat_task_stores_the_gateways_verdict_and_pages_show_it_beside_ours(
    gateway, ledger, operator, monkeypatch
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    monkeypatch.setenv(TOKEN_ENV, "s3cret-token")
    link(address)

    states = read_gateway_links()

    assert states == {NAME: "ok"}
    assert script.connect_params[0]["auth"] == {"token": "s3cret-token"}
    assert script.calls == [("doctor.memory.status", {"agentId": "main", "deep": True})]
    verdict = GatewayMemoryVerdict.objects.get(gateway_id=NAME, agent_id="main")
    assert (verdict.state, verdict.memory_safety, verdict.repair_backlog_count) == (
        "ok",
        "error",
        3,
    )
    assert (verdict.pending_repair_count, verdict.raw_fallback_count) == (1, 2)
    assert verdict.payload["semanticMemory"]["repairBacklogCount"] == 3

    page = overview_panel(operator)
    assert "gateway says: error, 3 repairs queued, 1 pending repair, 1 repair failure" in page
    assert "here: 1 acknowledged by an operator, 1 at risk" in page
    assert "s3cret-token" not in page

    # The gap's number links to exactly the receipt behind it.
    gap_url = html.unescape(re.search(r'class="gap-link" href="([^"]+)"', page).group(1))
    assert parse_qs(urlsplit(gap_url).query) == {
        "gateway": [NAME],
        "agent": ["main"],
        "gap": ["true"],
    }
    listed = operator.get(gap_url)
    assert [r.receipt_id for r in listed.context["rows"]] == [ledger["acked"]]
    gateway_side = operator.get(gap_url.replace("gap=true", "gap=gateway"))
    assert [r.receipt_id for r in gateway_side.context["rows"]] == [ledger["acked"]]
    assert operator.get(gap_url.replace("gap=true", "gap=here")).context["rows"] == []

    agent_page = operator.get(reverse("agents:detail", args=["main"]) + f"?gateway={NAME}")
    assert agent_page.status_code == 200
    body = agent_page.content.decode()
    assert "gateway says: error, 3 repairs queued" in body
    assert "here: 1 acknowledged by an operator" in body
    # An operator is not an admin: no repair button.
    assert 'data-action="gateway-repair-run"' not in body


def test_pages_read_the_stored_verdict_and_never_connect(gateway, ledger, operator) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    link(address)
    read_gateway_links()
    connects = len(script.connect_params)

    for url in (
        reverse("receipts:overview"),
        reverse("operations:gateway_link"),
        reverse("agents:detail", args=["main"]),
    ):
        assert operator.get(url).status_code == 200

    assert len(script.connect_params) == connects


def test_the_gap_is_in_metrics_and_alertable(gateway, ledger, read_token) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    link(address)
    read_gateway_links()

    text = (
        Client().get(reverse("metrics"), HTTP_AUTHORIZATION=f"Bearer {read_token}").content.decode()
    )
    assert f'opensquilla_gateway_memory_gap{{agent="main",gateway="{NAME}"}} 1.0' in text
    assert f'opensquilla_gateway_link_state{{gateway="{NAME}",state="ok"}} 1.0' in text
    assert f'opensquilla_gateway_link_state{{gateway="{NAME}",state="unreachable"}} 0.0' in text
    assert f'opensquilla_gateway_repair_backlog{{agent="main",gateway="{NAME}"}} 3.0' in text
    assert f'opensquilla_gateway_memory_safety_error{{agent="main",gateway="{NAME}"}} 1.0' in text

    rule = AlertRule(
        name="gap", condition=AlertRule.GATEWAY_MEMORY_GAP, threshold=1, channel="webhook"
    )
    fired = firing_subjects(rule, Snapshot.read())
    assert list(fired) == [f"{NAME}/main"]
    assert "disagree on 1 receipt of agent main" in fired[f"{NAME}/main"].summary

    # Acknowledging the other failure here too widens the gap to two.
    acknowledge_receipt(receipt_id=ledger["failing"], actor=Actor("bob", "console"), reason="ok")
    assert firing_subjects(rule, Snapshot.read())[f"{NAME}/main"].value == 2


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _refuse_token(script: Script) -> None:
    script.connect_error = {"code": "UNAUTHORIZED", "message": "Authentication failed"}


def _guest(script: Script) -> None:
    script.principal = {"role": "operator", "scopes": ["operator.read"], "authState": "guest"}


def _invalid(script: Script) -> None:
    script.principal = {"role": "operator", "scopes": [], "authState": "invalid"}


def _no_method(script: Script) -> None:
    script.methods = ["health"]


def _new_protocol(script: Script) -> None:
    script.protocol = 9


def _silent(script: Script) -> None:
    script.send_challenge = False


def _forbidden(script: Script) -> None:
    script.answers["doctor.memory.status"] = lambda params: {
        "ok": False,
        "error": {"code": "UNAUTHORIZED", "message": "Insufficient scope: operator.read"},
    }


@pytest.mark.parametrize(
    ("arrange", "state", "words"),
    [
        (_refuse_token, "token_refused", "the gateway refused the token"),
        (_invalid, "token_refused", "rate-limited guest"),
        (_guest, "guest", "the gateway connected us only as a guest"),
        (_no_method, "unknown_method", "this gateway does not offer the method"),
        (_new_protocol, "protocol_unsupported", "protocol version this console does not"),
        (_silent, "timeout", "the gateway did not answer in time"),
        (_forbidden, "forbidden", "the token lacks the scope this needs"),
    ],
)
def test_each_failure_is_one_stored_state_with_its_message(
    gateway, ledger, operator, settings, arrange, state, words
) -> None:
    settings.OPENSQUILLA_GATEWAY_LINK_TIMEOUT = 0.5
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    arrange(script)
    link(address)

    assert read_gateway_links() == {NAME: state}

    stored = GatewayLink.objects.get(gateway_id=NAME)
    assert stored.state == state
    assert words in stored.message
    assert GatewayMemoryVerdict.objects.get(gateway_id=NAME, agent_id="main").state == state
    body = overview_panel(operator)
    # The link's reachability and the gateway's verdict are two facts; neither side read
    # now, so the two are not compared (never "in step").
    reach = reachability(state)
    assert re.search(rf'link-state (ok|bad)" data-state="{state}">{reach}<', body)
    assert words in body  # operators read the connection's own message
    assert "gateway says: nothing yet" in body
    assert 'data-agreement="not_compared"' in body
    assert 'data-agreement="in_step"' not in body


def test_an_unreachable_gateway_keeps_the_last_answer_with_its_age(
    gateway, ledger, operator
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    link(address)
    read_gateway_links()
    link(f"127.0.0.1:{_closed_port()}")

    assert read_gateway_links() == {NAME: "unreachable"}

    verdict = GatewayMemoryVerdict.objects.get(gateway_id=NAME, agent_id="main")
    assert (verdict.state, verdict.memory_safety, verdict.repair_backlog_count) == (
        "unreachable",
        "error",
        3,
    )
    body = overview_panel(operator)
    assert "the gateway cannot be reached" in body
    assert "gateway says: error, 3 repairs queued" in body
    assert "(last answer" in body

    # The link-state alert fires once the link has failed for longer than its threshold.
    rule = AlertRule(name="link", condition=AlertRule.GATEWAY_LINK, threshold=60, channel="email")
    assert firing_subjects(rule, Snapshot.read()) == {}
    stored = GatewayLink.objects.get(gateway_id=NAME)
    GatewayLink.objects.filter(pk=stored.pk).update(failing_since=stored.checked_at - 3_600_000)
    fired = firing_subjects(rule, Snapshot.read(now=stored.checked_at))
    assert list(fired) == [NAME]
    assert "is unreachable for 3600 s" in fired[NAME].summary


def test_a_gateway_that_fails_does_not_stop_the_others(gateway, ledger) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    link(f"127.0.0.1:{_closed_port()}")
    ensure_gateway("gw-b")
    Gateway.objects.filter(name="gw-b").update(rpc_address=address)

    assert read_gateway_links() == {NAME: "unreachable", "gw-b": "ok"}


def test_the_token_comes_from_the_variable_the_gateway_names(gateway, ledger, monkeypatch):
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    monkeypatch.setenv("OPENSQUILLA_GATEWAY_TOKEN_GW_A_SECRET", "from-my-variable")
    monkeypatch.setenv(TOKEN_ENV, "not-this-one")
    link(address, rpc_token_env="OPENSQUILLA_GATEWAY_TOKEN_GW_A_SECRET")

    read_gateway_links()

    assert script.connect_params[0]["auth"] == {"token": "from-my-variable"}


def test_the_admin_edits_the_link_and_never_shows_a_token(ledger, admin, monkeypatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "never-rendered")
    url = reverse("admin:sessions_app_gateway_change", args=[NAME])

    page = admin.get(url).content.decode()
    assert "never-rendered" not in page
    assert f"read from ${TOKEN_ENV} (set in this web process)" in page

    posted = admin.post(
        url, {"display_name": "A", "rpc_address": "nothing here", "rpc_token_env": "1bad"}
    )
    assert posted.status_code == 200  # the form again, with both errors
    assert "not a gateway address" in posted.content.decode()
    assert "Name a variable that starts with OPENSQUILLA_GATEWAY_TOKEN_" in posted.content.decode()
    saved = admin.post(
        url,
        {
            "display_name": "A",
            "rpc_address": "127.0.0.1:9000",
            "rpc_token_env": "OPENSQUILLA_GATEWAY_TOKEN_SHARED",
        },
    )
    assert saved.status_code == 302, saved.context["adminform"].form.errors
    stored = Gateway.objects.get(name=NAME)
    assert (stored.rpc_address, stored.rpc_token_env) == (
        "127.0.0.1:9000",
        "OPENSQUILLA_GATEWAY_TOKEN_SHARED",
    )


def test_links_configured_in_the_environment(gateway, ledger, settings) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    settings.OPENSQUILLA_GATEWAY_LINKS = f"gw-new=ws://{address}/ws"

    assert read_gateway_links() == {"gw-new": "ok"}
    assert Gateway.objects.get(name="gw-new").rpc_address == f"ws://{address}/ws"

    with pytest.raises(LinkConfigError, match="is not NAME=ADDRESS"):
        parse_links("gw-new")
    with pytest.raises(LinkConfigError, match="linked twice"):
        parse_links("a=h:1 a=h:2")
    # A bad entry is logged; the gateways linked in the admin are still read.
    settings.OPENSQUILLA_GATEWAY_LINKS = "Not A Slug=x"
    assert read_gateway_links() == {"gw-new": "ok"}


def _repair_answer(receipt_ids: list[str]):
    def answer(params: dict[str, Any]) -> dict[str, Any]:
        results = [
            {"receiptId": rid, "status": "failed_retryable", "reason": "provider_failed"}
            for rid in receipt_ids
        ]
        return {"ok": True, "payload": {"agentId": params["agentId"], "results": results}}

    return answer


def test_an_admin_asks_the_gateway_to_run_its_due_repairs(
    gateway, ledger, admin, repairs_inline, django_capture_on_commit_callbacks
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    script.answers["memory.repair.run"] = _repair_answer([ledger["failing"], "only-upstream"])
    link(address)
    read_gateway_links()
    agent_url = reverse("agents:detail", args=["main"]) + f"?gateway={NAME}"
    assert 'data-action="gateway-repair-run"' in admin.get(agent_url).content.decode()

    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(
            reverse("agents:gateway_repairs", args=["main"]) + f"?gateway={NAME}",
            {"confirm": "yes"},
            follow=True,
        )

    # The page queued the run and said so; a worker asked the gateway.
    assert response.status_code == 200
    assert "queued; the outcome appears in the audit trail" in response.content.decode()
    assert repairs_inline == [{"gateway": NAME, "agent": "main", "actor": ["ada", "console"]}]
    assert ("memory.repair.run", {"agentId": "main"}) in script.calls
    event = ReceiptEvent.objects.get(receipt_id=ledger["failing"], action="gateway_repair_run")
    assert (event.actor, event.surface, event.outcome) == ("ada", "console", "failed_retryable")
    assert event.gateway_id == NAME
    assert event.details["result"]["reason"] == "provider_failed"
    queued, run = ReceiptEvent.objects.filter(receipt_id="", action="gateway_repair_run").order_by(
        "id"
    )
    assert (queued.outcome, queued.actor, queued.gateway_id) == ("queued", "ada", NAME)
    assert (run.outcome, run.actor, run.gateway_id) == ("ok", "ada", NAME)
    assert run.details["receipt_ids"] == [ledger["failing"], "only-upstream"]
    # The audit log's row of the run names the agent, how many ran and which receipts.
    audit = html.unescape(
        admin.get(reverse("receipts:audit") + "?action=gateway_repair_run").content.decode()
    )
    rows = re.findall(r'<span class="repair-run small">(.*?)</span>\s*</td>', audit, re.S)
    summary = " ".join(re.sub(r"<[^>]+>", "", rows[0]).split())
    assert summary.startswith("agent main · 2 ran:")
    assert reverse("receipts:detail", args=[ledger["failing"]]) in audit
    assert reverse("receipts:detail", args=["only-upstream"]) in audit


def test_no_repair_run_without_admin_scope_or_the_method(gateway, ledger, admin, operator):
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    script.principal = {"role": "operator", "scopes": ["operator.read"], "authState": "ok"}
    link(address)
    read_gateway_links()
    agent_url = reverse("agents:detail", args=["main"]) + f"?gateway={NAME}"
    run_url = reverse("agents:gateway_repairs", args=["main"]) + f"?gateway={NAME}"

    assert 'data-action="gateway-repair-run"' not in admin.get(agent_url).content.decode()
    refused = admin.post(run_url)
    assert refused.status_code == 409
    assert "needs operator.admin" in refused.content.decode()
    assert operator.post(run_url).status_code == 403
    assert not any(method == "memory.repair.run" for method, _ in script.calls)
    assert not ReceiptEvent.objects.filter(action="gateway_repair_run").exists()


def test_without_a_linked_gateway_the_panel_is_empty(ledger, operator) -> None:
    assert overview_panel(operator).strip() == ""
    assert (
        "gateway's own view"
        not in operator.get(reverse("agents:detail", args=["main"])).content.decode()
    )


def test_the_panel_is_scoped_to_the_overviews_gateway(gateway, ledger, operator) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    link(address)
    read_gateway_links()

    scoped = operator.get(reverse("receipts:overview") + "?gateway=local").content.decode()
    assert "/operations/gateway-link/?gateway=local" in scoped
    # As the overview's slot asks (htmx): the fragment alone, empty for a gateway not linked.
    panel = operator.get(
        reverse("operations:gateway_link") + "?gateway=local", HTTP_HX_REQUEST="true"
    )
    assert panel.content.decode().strip() == ""
    assert (
        NAME
        in operator.get(reverse("operations:gateway_link") + f"?gateway={NAME}").content.decode()
    )
    assert operator.get(reverse("operations:gateway_link") + "?gateway=Bad Name").status_code == 400


def test_the_gap_filter_is_refused_with_a_message_for_nonsense(operator) -> None:
    response = operator.get(reverse("receipts:list") + "?gap=sideways")
    assert response.status_code == 400
    assert "gap must be true (any), gateway or here" in response.content.decode()


def test_a_scrape_reads_the_link_in_the_same_queries_for_one_gateway_as_for_three(
    gateway, ledger, read_token
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    link(address)
    read_gateway_links()
    client = Client()
    headers = {"HTTP_AUTHORIZATION": f"Bearer {read_token}"}
    client.get(reverse("metrics"), **headers)  # stamps the token's last use
    with CaptureQueriesContext(connection) as one:
        client.get(reverse("metrics"), **headers)
    for name in ("gw-b", "gw-c"):
        ensure_gateway(name)
        Gateway.objects.filter(name=name).update(rpc_address=address)
    read_gateway_links()
    with CaptureQueriesContext(connection) as three:
        text = client.get(reverse("metrics"), **headers).content.decode()

    assert 'opensquilla_gateway_link_state{gateway="gw-c",state="ok"} 1.0' in text
    assert len(three.captured_queries) == len(one.captured_queries)


def test_import_opensquilla_links_the_gateway_it_imports(golden_dir, tmp_path, settings) -> None:
    settings.OPENSQUILLA_CHECKPOINT_WORKSPACE = str(tmp_path / "ours")
    settings.OPENSQUILLA_MEMORY_WORKSPACE = None
    golden = golden_dir / "opensquilla-0.3.0"
    with pytest.raises(CommandError, match="not a gateway address"):
        call_command(
            "import_opensquilla",
            str(golden / "sessions.db"),
            "--gateway",
            "gw-cli",
            "--rpc-address",
            "ftp://nowhere",
            "--no-progress",
        )
    assert not Gateway.objects.filter(name="gw-cli").exists()  # refused before any work

    call_command(
        "import_opensquilla",
        str(golden / "sessions.db"),
        "--workspace",
        str(golden / "workspace"),
        "--gateway",
        "gw-cli",
        "--rpc-address",
        "127.0.0.1:18791",
        "--rpc-token-env",
        "OPENSQUILLA_GATEWAY_TOKEN_CLI",
        "--no-progress",
        stdout=StringIO(),
        stderr=StringIO(),
    )

    stored = Gateway.objects.get(name="gw-cli")
    assert (stored.rpc_address, stored.rpc_token_env) == (
        "127.0.0.1:18791",
        "OPENSQUILLA_GATEWAY_TOKEN_CLI",
    )


def test_the_repair_run_asks_for_confirmation_before_calling(
    gateway, ledger, admin, repairs_inline, django_capture_on_commit_callbacks
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    script.answers["memory.repair.run"] = _repair_answer([ledger["failing"]])
    link(address)
    read_gateway_links()
    run_url = reverse("agents:gateway_repairs", args=["main"]) + f"?gateway={NAME}"

    asked = admin.post(run_url)

    assert asked.status_code == 200
    page = asked.content.decode()
    assert f"Ask gateway <code>{NAME}</code> to run its due repairs" in page
    assert 'name="confirm" value="yes"' in page
    assert not any(method == "memory.repair.run" for method, _ in script.calls)
    assert not ReceiptEvent.objects.filter(action="gateway_repair_run").exists()
    with django_capture_on_commit_callbacks(execute=True):
        ran = admin.post(run_url, {"confirm": "yes"}, follow=True)
    assert "queued; the outcome appears in the audit trail" in ran.content.decode()


@pytest.mark.parametrize("how", ["version", "retired ledger"])
def test_a_gateway_past_0_5_5_is_never_offered_a_repair_run(gateway, ledger, admin, how) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    if how == "version":
        script.version = "0.5.5"  # its hello still listing the method would not matter
    link(address)
    if how == "retired ledger":
        Gateway.objects.filter(name=NAME).update(ledger_retired_at=1)
    read_gateway_links()
    agent_url = reverse("agents:detail", args=["main"]) + f"?gateway={NAME}"
    run_url = reverse("agents:gateway_repairs", args=["main"]) + f"?gateway={NAME}"

    page = admin.get(agent_url).content.decode()

    assert 'data-action="gateway-repair-run"' not in page
    assert "no longer answers <code>memory.repair.list</code>" in page
    assert "the gateway no longer runs repairs (0.5.5+)" in page
    refused = admin.post(run_url, {"confirm": "yes"})
    assert refused.status_code == 409
    assert "no longer answers memory.repair.run" in refused.content.decode()
    assert not any(method == "memory.repair.run" for method, _ in script.calls)
