"""A tiny scripted OpenSquilla gateway (WebSocket RPC) for the link's fast tests.

It speaks exactly the frames upstream's gateway sends (``connect.challenge``, ``hello-ok`` or
a ``res`` error, then ``res`` answers with ``tick`` events in between); tests change the
``Script`` before connecting. The ``gateway`` fixture (conftest.py) starts one per test.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from websockets.exceptions import ConnectionClosed
from websockets.sync.server import ServerConnection, serve

ADMIN = {"role": "operator", "scopes": ["operator.admin"], "authState": "authenticated"}
STATUS = {
    "agentId": "main",
    "memorySafety": {"status": "error"},
    "semanticMemory": {"status": "degraded", "repairBacklogCount": 3},
    "pendingRepairCount": 1,
    "repairFailures": [{"summaryId": 4, "flushReceiptStatus": "failed_retryable"}],
    "rawFallbackCount": 2,
}


@dataclass
class Script:
    """How the fake gateway behaves; tests change fields before connecting."""

    protocol: int = 4
    version: str = "0.5.3"
    methods: list[str] = field(
        default_factory=lambda: ["doctor.memory.status", "memory.repair.run", "health"]
    )
    principal: dict[str, Any] | None = field(default_factory=lambda: dict(ADMIN))
    connect_error: dict[str, Any] | None = None  # a res error instead of hello-ok
    answers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = field(default_factory=dict)
    send_challenge: bool = True
    calls: list[tuple[str, Any]] = field(default_factory=list)
    connect_params: list[dict[str, Any]] = field(default_factory=list)


@contextmanager
def scripted_gateway() -> Iterator[tuple[str, Script]]:
    script = Script()

    def handler(ws: ServerConnection) -> None:
        if not script.send_challenge:
            with contextlib.suppress(ConnectionClosed):
                ws.recv()  # hold the connection open, never challenge
            return
        ws.send(
            json.dumps({"type": "event", "event": "connect.challenge", "payload": {"nonce": "n"}})
        )
        connect = json.loads(ws.recv())
        script.connect_params.append(connect["params"])
        if script.connect_error is not None:
            ws.send(
                json.dumps(
                    {"type": "res", "id": connect["id"], "ok": False, "error": script.connect_error}
                )
            )
            return
        hello: dict[str, Any] = {
            "type": "hello-ok",
            "protocol": script.protocol,
            "server": {"version": script.version, "conn_id": "c"},
            "features": {"methods": script.methods, "events": ["tick"]},
            "snapshot": {"state_dir": "/srv/state", "auth_mode": "token"},
            "policy": {},
            "auth": None if script.principal is None else {"principal": script.principal},
        }
        ws.send(json.dumps(hello))
        for raw in ws:
            frame = json.loads(raw)
            script.calls.append((frame["method"], frame.get("params")))
            ws.send(json.dumps({"type": "event", "event": "tick", "payload": {}}))
            answer = script.answers.get(frame["method"])
            if answer is None:
                reply = {
                    "ok": False,
                    "error": {
                        "code": "METHOD_NOT_FOUND",
                        "message": f"Method not found: {frame['method']}",
                    },
                }
            else:
                reply = answer(frame.get("params") or {})
            ws.send(json.dumps({"type": "res", "id": frame["id"], **reply}))

    with serve(handler, "127.0.0.1", 0) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        port = server.socket.getsockname()[1]
        yield f"127.0.0.1:{port}", script
        server.shutdown()


def status_answer(params: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "payload": {**STATUS, "agentId": params.get("agentId")}}
