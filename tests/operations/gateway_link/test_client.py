"""The gateway link against a tiny scripted WebSocket server, one failure state per test.

The fake speaks exactly the frames upstream's gateway sends (``connect.challenge``,
``hello-ok`` or a ``res`` error, then ``res`` answers with ``tick`` events in between), so
every way a real gateway can answer maps to the state an operator would be shown.
"""

from __future__ import annotations

import socket

import pytest

from operations_app.gateway_link import (
    LinkState,
    gateway_ws_url,
    read_memory_status,
    run_due_repairs,
)

from .fake_gateway import status_answer


def test_the_gateways_own_verdict_is_read_per_agent(gateway) -> None:
    address, script = gateway
    script.answers["doctor.memory.status"] = status_answer

    answer = read_memory_status(address, agent_ids=["main", "ops"], token="t0k", timeout=2)

    assert answer.state is LinkState.OK
    verdict = answer.value["main"].value
    assert (verdict.memory_safety, verdict.repair_status, verdict.repair_backlog) == (
        "error",
        "degraded",
        3,
    )
    assert (verdict.pending_repairs, verdict.raw_fallbacks, len(verdict.repair_failures)) == (
        1,
        2,
        1,
    )
    assert answer.value["ops"].value.agent_id == "ops"
    assert script.calls == [
        ("doctor.memory.status", {"agentId": "main", "deep": True}),
        ("doctor.memory.status", {"agentId": "ops", "deep": True}),
    ]
    (params,) = script.connect_params
    assert (params["minProtocol"], params["maxProtocol"], params["role"]) == (3, 4, "operator")
    assert params["auth"] == {"token": "t0k"}
    assert answer.hello.state_dir == "/srv/state"


def test_a_bad_token_that_connects_as_a_guest_is_refused_without_a_call(gateway) -> None:
    address, script = gateway
    script.principal = {"role": "operator", "scopes": [], "authState": "invalid"}
    script.answers["doctor.memory.status"] = status_answer

    answer = read_memory_status(address, token="wrong", timeout=2)

    assert answer.state is LinkState.TOKEN_REFUSED
    assert "rate-limited guest" in answer.message
    assert script.calls == []


def test_no_token_on_a_gateway_that_wants_one_is_a_guest(gateway) -> None:
    address, script = gateway
    script.principal = {"role": "operator", "scopes": ["operator.read"], "authState": "guest"}

    answer = read_memory_status(address, timeout=2)

    assert answer.state is LinkState.GUEST
    assert answer.message == (
        "the gateway connected us only as a guest: give the gateway's token to read its memory"
    )


def test_a_0_3_0_gateway_refusing_the_token_at_connect(gateway) -> None:
    address, script = gateway
    script.connect_error = {"code": "UNAUTHORIZED", "message": "Authentication failed"}

    answer = read_memory_status(address, token="wrong", timeout=2)

    assert answer.state is LinkState.TOKEN_REFUSED
    assert answer.failure.code == "UNAUTHORIZED"


def test_a_method_the_gateway_does_not_list_is_unknown_without_a_call(gateway) -> None:
    address, script = gateway
    script.methods = ["health"]

    answer = read_memory_status(address, timeout=2)

    assert answer.state is LinkState.UNKNOWN_METHOD
    assert script.calls == []


def test_a_listed_method_the_gateway_then_does_not_find(gateway) -> None:
    address, _script = gateway  # doctor.memory.status is listed but has no answer

    answer = read_memory_status(address, timeout=2)

    assert answer.state is LinkState.OK
    assert answer.value["main"].state is LinkState.UNKNOWN_METHOD
    assert "Method not found" in answer.value["main"].message


def test_a_protocol_range_the_gateway_refuses(gateway) -> None:
    address, script = gateway
    script.connect_error = {
        "code": "INVALID_REQUEST",
        "message": "Unsupported protocol version range",
    }

    answer = read_memory_status(address, timeout=2)

    assert answer.state is LinkState.PROTOCOL_UNSUPPORTED
    assert "3–4" in answer.message


def test_a_protocol_version_outside_ours(gateway) -> None:
    address, script = gateway
    script.protocol = 5

    assert read_memory_status(address, timeout=2).state is LinkState.PROTOCOL_UNSUPPORTED


def test_a_gateway_that_never_challenges_times_out(gateway) -> None:
    address, script = gateway
    script.send_challenge = False

    answer = read_memory_status(address, timeout=0.3)

    assert answer.state is LinkState.TIMEOUT


def test_nothing_listening_is_unreachable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port is closed again: nothing listens there.

    answer = read_memory_status(f"127.0.0.1:{port}", timeout=1)

    assert answer.state is LinkState.UNREACHABLE
    assert answer.value is None


def test_an_address_without_a_host_is_unreachable_not_an_exception() -> None:
    assert read_memory_status("ws://:80", timeout=1).state is LinkState.UNREACHABLE


def test_repairs_run_only_with_admin_scope(gateway) -> None:
    address, script = gateway
    script.principal = {
        "role": "operator",
        "scopes": ["operator.read"],
        "authState": "authenticated",
    }

    answer = run_due_repairs(address, token="t", timeout=2)

    assert answer.state is LinkState.FORBIDDEN
    assert "operator.admin" in answer.message
    assert script.calls == []


def test_repairs_run_returns_the_gateways_results(gateway) -> None:
    address, script = gateway
    script.answers["memory.repair.run"] = lambda params: {
        "ok": True,
        "payload": {
            "agentId": params["agentId"],
            "count": 1,
            "results": [{"receiptId": "r-1", "status": "failed_retryable"}],
        },
    }

    answer = run_due_repairs(address, agent_id="ops", token="t", limit=3, timeout=2)

    assert answer.state is LinkState.OK
    assert answer.value.results == ({"receiptId": "r-1", "status": "failed_retryable"},)
    assert script.calls == [("memory.repair.run", {"agentId": "ops", "limit": 3})]


def test_a_gateway_error_answer_is_a_state(gateway) -> None:
    address, script = gateway
    script.answers["memory.repair.run"] = lambda params: {
        "ok": False,
        "error": {"code": "UNAVAILABLE", "message": "Session flush service is not configured"},
    }

    answer = run_due_repairs(address, timeout=2)

    assert answer.state is LinkState.GATEWAY_ERROR
    assert "Session flush service is not configured" in answer.message


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("gw.local", "ws://gw.local:18791/ws"),
        ("10.0.0.5:9000", "ws://10.0.0.5:9000/ws"),
        ("https://gw.example.com", "wss://gw.example.com/ws"),
        ("ws://127.0.0.1:8/ws", "ws://127.0.0.1:8/ws"),
    ],
)
def test_addresses_become_the_ws_url(address: str, url: str) -> None:
    assert gateway_ws_url(address) == url
