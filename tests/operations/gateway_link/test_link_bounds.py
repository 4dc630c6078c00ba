"""The gateway link holds no one's secrets but its own, reaches only what the server's settings
allow, never calls a gateway inside a web request, and stores no answer it cannot store.

The attacker's probe, as tests: an admin who names ``DJANGO_SECRET_KEY`` as the token variable
or points the link at the server's own network, a gateway that answers with a NUL or a count
of 10^30, and a viewer reading the panel of a failing link.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from operations_app.gateway_link.client import unstorable
from operations_app.models import GatewayLink, GatewayMemoryVerdict
from operations_app.tasks import read_gateway_links
from receipts_app.models import ReceiptEvent
from sessions_app.gateways import Gateway
from sessions_app.link_policy import address_refusal
from tests.console.conftest import _client_for

from .fake_gateway import status_answer
from .test_link_wiring import NAME, _closed_port, admin, ledger, link, operator, overview_panel

pytestmark = pytest.mark.django_db

__all__ = ["admin", "ledger", "operator"]  # fixtures used here, defined beside the wiring tests
SECRET = "django-secret-never-sent"


@pytest.fixture
def viewer() -> Client:
    return _client_for("viewer", "vera")


# --- the token: only OPENSQUILLA_GATEWAY_TOKEN_* --------------------------------------------


def test_the_admin_cannot_name_another_variable_and_is_not_told_whether_it_exists(
    ledger, admin, monkeypatch
) -> None:
    monkeypatch.setenv("DJANGO_SECRET_KEY", SECRET)
    url = reverse("admin:sessions_app_gateway_change", args=[NAME])

    posted = admin.post(
        url,
        {
            "display_name": "A",
            "rpc_address": "127.0.0.1:9000",
            "rpc_token_env": "DJANGO_SECRET_KEY",
        },
    )

    body = posted.content.decode()
    assert posted.status_code == 200  # the form again
    assert "Name a variable that starts with OPENSQUILLA_GATEWAY_TOKEN_" in body
    assert "set in this web process" not in body
    assert SECRET not in body
    assert Gateway.objects.get(name=NAME).rpc_token_env == ""


def test_a_stored_variable_outside_the_prefix_is_never_read_and_the_link_says_why(
    gateway, ledger, admin, monkeypatch
) -> None:
    # A row stored before the rule: kept as it is, never read, never silently replaced.
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    monkeypatch.setenv("DJANGO_SECRET_KEY", SECRET)
    link(address, rpc_token_env="DJANGO_SECRET_KEY")

    assert read_gateway_links() == {NAME: "refused"}

    assert script.connect_params == []  # nothing was sent anywhere
    stored = GatewayLink.objects.get(gateway_id=NAME)
    assert "DJANGO_SECRET_KEY is not an OPENSQUILLA_GATEWAY_TOKEN_* name" in stored.message
    page = admin.get(reverse("admin:sessions_app_gateway_change", args=[NAME])).content.decode()
    assert "refused: the token variable DJANGO_SECRET_KEY" in page
    assert "set in this web process" not in page and SECRET not in page


def test_import_opensquilla_refuses_a_variable_outside_the_prefix(golden_dir, settings) -> None:
    golden = golden_dir / "opensquilla-0.3.0"
    with pytest.raises(CommandError, match="starts with OPENSQUILLA_GATEWAY_TOKEN_"):
        call_command(
            "import_opensquilla",
            str(golden / "sessions.db"),
            "--gateway",
            "gw-cli",
            "--rpc-address",
            "127.0.0.1:18791",
            "--rpc-token-env",
            "DATABASE_URL",
            "--no-progress",
            stdout=StringIO(),
            stderr=StringIO(),
        )
    assert not Gateway.objects.filter(name="gw-cli").exists()


# --- the address: only what OPENSQUILLA_GATEWAY_LINK_HOSTS allows ---------------------------


def test_an_address_outside_the_allow_list_is_refused_everywhere(
    gateway, ledger, admin, settings, golden_dir
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    settings.OPENSQUILLA_GATEWAY_LINK_HOSTS = []
    url = reverse("admin:sessions_app_gateway_change", args=[NAME])

    posted = admin.post(url, {"display_name": "A", "rpc_address": address, "rpc_token_env": ""})
    assert posted.status_code == 200
    assert "not in OPENSQUILLA_GATEWAY_LINK_HOSTS" in posted.content.decode()
    with pytest.raises(CommandError, match="not in OPENSQUILLA_GATEWAY_LINK_HOSTS"):
        call_command(
            "import_opensquilla",
            str(golden_dir / "opensquilla-0.3.0" / "sessions.db"),
            "--gateway",
            "gw-cli",
            "--rpc-address",
            address,
            "--no-progress",
            stdout=StringIO(),
            stderr=StringIO(),
        )
    # An address stored before the rule (or a host the settings stopped allowing) is not
    # connected to: beat's reading says why.
    link(address)
    assert read_gateway_links() == {NAME: "refused"}
    assert script.connect_params == []


def test_a_wildcard_never_reaches_a_private_or_loopback_host(settings) -> None:
    settings.OPENSQUILLA_GATEWAY_LINK_HOSTS = ["*"]
    assert "private or local address" in address_refusal("localhost:18791")
    assert "private or local address" in address_refusal("ws://10.1.2.3:18791/ws")
    assert "private or local address" in address_refusal("169.254.169.254:80")
    # Named exactly by the server's operator, a private host may be linked.
    settings.OPENSQUILLA_GATEWAY_LINK_HOSTS = ["*", "10.1.2.3"]
    assert address_refusal("ws://10.1.2.3:18791/ws") is None
    assert "private or local address" in address_refusal("10.1.2.4:18791")
    settings.OPENSQUILLA_GATEWAY_LINK_HOSTS = [".gateways.example"]
    assert "not in OPENSQUILLA_GATEWAY_LINK_HOSTS" in address_refusal("evil.example:1")


def test_the_environments_own_links_are_allowed(settings) -> None:
    settings.OPENSQUILLA_GATEWAY_LINK_HOSTS = []
    settings.OPENSQUILLA_GATEWAY_LINKS = "gw-b=ws://10.0.0.5:18791/ws"
    assert address_refusal("10.0.0.5:18791") is None
    assert address_refusal("10.0.0.6:18791") is not None


# --- viewers see reachability, not connection details -------------------------------------


def test_a_viewer_sees_the_links_reachability_and_no_address_or_error(
    gateway, ledger, viewer, operator
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    port = _closed_port()
    link(f"127.0.0.1:{port}")
    read_gateway_links()
    stored = GatewayLink.objects.get(gateway_id=NAME)
    assert stored.state == "unreachable" and str(port) in stored.message

    for url in (
        None,  # the overview's panel
        reverse("agents:detail", args=["main"]) + f"?gateway={NAME}",
    ):
        body = overview_panel(viewer) if url is None else viewer.get(url).content.decode()
        assert ">unreachable<" in body
        assert str(port) not in body
        assert "127.0.0.1" not in body
        assert "Errno" not in body and "refused" not in body
    # Operators see the connection's own message.
    assert str(port) in overview_panel(operator)


# --- no remote call inside a web request --------------------------------------------------


def test_run_due_repairs_only_queues_inside_the_request(gateway, ledger, admin, monkeypatch):
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    link(address)
    read_gateway_links()
    script.calls.clear()
    from operations_app import tasks

    published: list[dict] = []
    monkeypatch.setattr(
        tasks.run_gateway_repairs, "apply_async", lambda **kw: published.append(kw["kwargs"])
    )

    response = admin.post(
        reverse("agents:gateway_repairs", args=["main"]) + f"?gateway={NAME}",
        {"confirm": "yes"},
        follow=True,
    )

    assert response.status_code == 200
    assert "queued" in response.content.decode()
    assert script.calls == []  # the gateway was not asked by the web process
    event = ReceiptEvent.objects.get(action="gateway_repair_run")
    assert (event.outcome, event.details["agent"], event.gateway_id) == ("queued", "main", NAME)


# --- answers that cannot be stored are recorded failures ----------------------------------


@pytest.mark.parametrize(
    ("poison", "words"),
    [
        ({"memorySafety": {"status": "ok\x00"}}, "NUL"),
        ({"rawFallbackCount": 10**30}, "64 bits"),
        ({"pendingRepairCount": 2**40}, "out of range"),
        ({"pendingRepairCount": -1}, "out of range"),
    ],
)
def test_a_reading_that_cannot_be_stored_is_a_recorded_bad_answer(
    gateway, ledger, operator, poison, words
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = lambda params: {
        "ok": True,
        "payload": {**status_answer(params)["payload"], **poison},
    }
    link(address)

    read_gateway_links()

    verdict = GatewayMemoryVerdict.objects.get(gateway_id=NAME, agent_id="main")
    assert verdict.state == "bad_answer"
    assert words in verdict.message
    assert verdict.answered_at is None  # nothing of the bad answer was stored
    assert overview_panel(operator)  # the panel renders it


def test_a_repair_answer_with_a_nul_is_a_recorded_failure_with_its_audit(
    gateway, ledger, admin, repairs_inline, django_capture_on_commit_callbacks
) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer
    script.answers["memory.repair.run"] = lambda params: {
        "ok": True,
        "payload": {"results": [{"receiptId": ledger["failing"], "status": "done\x00"}]},
    }
    link(address)
    read_gateway_links()

    with django_capture_on_commit_callbacks(execute=True):
        response = admin.post(
            reverse("agents:gateway_repairs", args=["main"]) + f"?gateway={NAME}",
            {"confirm": "yes"},
            follow=True,
        )

    assert response.status_code == 200
    outcomes = list(
        ReceiptEvent.objects.filter(action="gateway_repair_run", receipt_id="")
        .order_by("id")
        .values_list("outcome", flat=True)
    )
    assert outcomes == ["queued", "bad_answer"]
    run = ReceiptEvent.objects.filter(action="gateway_repair_run").order_by("id").last()
    assert "NUL" in run.reason
    assert (run.details["agent"], run.details["count"]) == ("main", 0)


def test_unstorable_finds_what_a_database_refuses() -> None:
    assert unstorable({"a": [1, {"b": "ok"}], "c": 2.5}) is None
    assert unstorable({"a": ["x\x00"]}) == "a text holds a NUL character"
    assert unstorable({"k\x00": 1}) == "a text holds a NUL character"
    assert unstorable([2**63]) == "a number exceeds 64 bits"
    assert unstorable([float("nan")]) == "a number is not finite"
