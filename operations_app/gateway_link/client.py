"""A read-mostly client of an OpenSquilla gateway's WebSocket RPC (docs/MIRROR.md#gateway-link).

The protocol (upstream's ``gateway/websocket.py`` and ``protocol.py``; not JSON-RPC 2.0):
1. connect to ``ws://host:port/ws``; the gateway sends the event ``connect.challenge``;
2. we send ``{"type": "req", "id", "method": "connect", "params": {minProtocol,
   maxProtocol, role: "operator", scopes, client, auth: {token}}}``;
3. the gateway answers ``hello-ok`` (protocol, ``server.version``, ``features.methods``,
   ``snapshot.state_dir``, and from protocol 4 ``auth.principal``), or a ``res`` error;
4. each call is a ``req`` frame, answered by ``{"type": "res", id, ok, payload | error}``;
   ``event`` frames (``tick``, ...) may arrive in between and are skipped.

Every public function returns a :class:`LinkAnswer`; nothing here raises for a network,
protocol or authorisation problem. Synchronous on purpose: its callers are a beat task and
a console action, and each call is one short connection.
"""

from __future__ import annotations

import contextlib
import json
import math
import platform
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
from websockets.sync.client import ClientConnection, connect

from sessions_app.gateways import rpc_ws_url

from .states import (
    GatewayHello,
    LinkAnswer,
    LinkFailure,
    LinkState,
    MemoryVerdict,
    RepairRun,
)

# 3 is 0.3.0's protocol, 4 is 0.5.3's and HEAD's; both carry the frames used here.
MIN_PROTOCOL = 3
MAX_PROTOCOL = 4
DEFAULT_TIMEOUT = 10.0
MEMORY_STATUS = "doctor.memory.status"
REPAIR_RUN = "memory.repair.run"
READ_SCOPE = "operator.read"
ADMIN_SCOPE = "operator.admin"
# Guests and rejected tokens, as protocol 4 names them in ``auth.principal.authState``.
_GUEST_STATES = {"guest", "invalid"}
_MAX_FRAME = 8 * 1024 * 1024


class _Failed(Exception):
    """Internal: carries a LinkFailure out of nested helpers; never leaves this module."""

    def __init__(self, failure: LinkFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _fail(state: LinkState, detail: str = "", code: str | None = None) -> _Failed:
    return _Failed(LinkFailure(state, detail, code))


def gateway_ws_url(address: str) -> str:
    """``host[:port]``, ``http(s)://host[:port]`` or ``ws(s)://host[:port][/ws]`` → the ``/ws`` URL.

    Raises ``ValueError`` for an address that names no host (the rule lives with the
    gateway model, which validates the admin's field with it).
    """
    return rpc_ws_url(address)


@dataclass
class GatewaySession:
    """One open, authenticated connection; use through :func:`open_session`."""

    ws: ClientConnection
    hello: GatewayHello
    timeout: float

    def call(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """The payload of ``method``; raises ``_Failed`` (caught by the public functions)."""
        if not self.hello.offers(method):
            raise _fail(
                LinkState.UNKNOWN_METHOD,
                f"{method} is not in this gateway's methods (version {self.hello.server_version})",
            )
        request_id = uuid.uuid4().hex
        _send(self.ws, {"type": "req", "id": request_id, "method": method, "params": params or {}})
        frame = _next_response(self.ws, self.timeout, request_id)
        if frame.get("ok") is True:
            return frame.get("payload")
        raise _call_error(method, frame.get("error"))


def open_session(
    address: str, *, token: str | None = None, timeout: float = DEFAULT_TIMEOUT
) -> tuple[GatewaySession | None, LinkFailure | None]:
    """Connect and authenticate: a session, or why there is none (never both, never neither)."""
    try:
        return _open(address, token=token, timeout=timeout), None
    except _Failed as failed:
        return None, failed.failure


def close_session(session: GatewaySession | None) -> None:
    if session is None:
        return
    _quiet_close(session.ws)


def read_memory_status(
    address: str,
    *,
    agent_ids: Iterable[str] = ("main",),
    token: str | None = None,
    deep: bool = True,
    timeout: float = DEFAULT_TIMEOUT,
) -> LinkAnswer[dict[str, LinkAnswer[MemoryVerdict]]]:
    """The gateway's own memory verdict for each agent, over one connection.

    The outer answer fails when the link itself does (unreachable, refused token, guest,
    protocol); otherwise each agent has its own answer, so one agent's error does not hide
    the others'.
    """
    session, failure = open_session(address, token=token, timeout=timeout)
    if session is None:
        return LinkAnswer(failure=failure)
    try:
        if not session.hello.offers(MEMORY_STATUS):
            return LinkAnswer(
                failure=LinkFailure(LinkState.UNKNOWN_METHOD, f"{MEMORY_STATUS} is not offered"),
                hello=session.hello,
            )
        verdicts: dict[str, LinkAnswer[MemoryVerdict]] = {}
        for agent_id in agent_ids:
            try:
                payload = session.call(MEMORY_STATUS, {"agentId": agent_id, "deep": deep})
                verdicts[agent_id] = LinkAnswer(
                    value=parse_memory_verdict(agent_id, payload), hello=session.hello
                )
            except _Failed as failed:
                if failed.failure.state in {LinkState.UNREACHABLE, LinkState.TIMEOUT}:
                    # The connection is gone: the remaining agents cannot be asked either.
                    return LinkAnswer(failure=failed.failure, hello=session.hello)
                verdicts[agent_id] = LinkAnswer(failure=failed.failure, hello=session.hello)
        return LinkAnswer(value=verdicts, hello=session.hello)
    finally:
        close_session(session)


def run_due_repairs(
    address: str,
    *,
    agent_id: str = "main",
    token: str | None = None,
    limit: int | None = None,
    timeout: float = 60.0,
) -> LinkAnswer[RepairRun]:
    """Ask the gateway to repair its due rows for ``agent_id`` (``memory.repair.run``).

    Asked only where the gateway offers the method and, when the hello names our
    principal, it holds ``operator.admin``; otherwise the answer says why, without a call.
    A repair flush can take a while, hence the longer default timeout.
    """
    session, failure = open_session(address, token=token, timeout=timeout)
    if session is None:
        return LinkAnswer(failure=failure)
    try:
        scopes = session.hello.scopes
        if scopes is not None and ADMIN_SCOPE not in scopes:
            return LinkAnswer(
                failure=LinkFailure(
                    LinkState.FORBIDDEN,
                    f"{REPAIR_RUN} needs {ADMIN_SCOPE}; the token has "
                    + (", ".join(sorted(scopes)) or "no scopes"),
                ),
                hello=session.hello,
            )
        params: dict[str, Any] = {"agentId": agent_id}
        if limit is not None:
            params["limit"] = int(limit)
        try:
            payload = session.call(REPAIR_RUN, params)
            return LinkAnswer(value=parse_repair_run(agent_id, payload), hello=session.hello)
        except _Failed as failed:
            return LinkAnswer(failure=failed.failure, hello=session.hello)
    finally:
        close_session(session)


# --- answers --------------------------------------------------------------------------------


def parse_memory_verdict(agent_id: str, payload: Any) -> MemoryVerdict:
    """``doctor.memory.status`` as a verdict; raises ``_Failed`` for a shape we cannot read."""
    if not isinstance(payload, Mapping):
        raise _fail(LinkState.NOT_A_GATEWAY, f"{MEMORY_STATUS} answered {type(payload).__name__}")
    safety = payload.get("memorySafety")
    semantic = payload.get("semanticMemory")
    if not isinstance(safety, Mapping) or not isinstance(semantic, Mapping):
        raise _fail(LinkState.NOT_A_GATEWAY, f"{MEMORY_STATUS} lacks memorySafety/semanticMemory")
    failures = payload.get("repairFailures")
    return MemoryVerdict(
        agent_id=str(payload.get("agentId") or agent_id),
        memory_safety=str(safety.get("status") or "unknown"),
        repair_status=str(semantic.get("status") or "unknown"),
        repair_backlog=_count(semantic.get("repairBacklogCount")) or 0,
        pending_repairs=_count(payload.get("pendingRepairCount")),
        repair_failures=tuple(f for f in failures if isinstance(f, dict))
        if isinstance(failures, list)
        else (),
        raw_fallbacks=_count(payload.get("rawFallbackCount")),
        payload=dict(payload),
    )


def parse_repair_run(agent_id: str, payload: Any) -> RepairRun:
    if not isinstance(payload, Mapping) or not isinstance(payload.get("results"), list):
        raise _fail(LinkState.NOT_A_GATEWAY, f"{REPAIR_RUN} answered without results[]")
    return RepairRun(
        agent_id=str(payload.get("agentId") or agent_id),
        results=tuple(r for r in payload["results"] if isinstance(r, dict)),
    )


# The stored counts are 32-bit columns (GatewayMemoryVerdict).
_COUNT_MAX = 2**31 - 1


def _count(value: Any) -> int | None:
    """A count the gateway sent: None when absent or not a number; a negative or larger
    count than a column holds is a bad answer (recorded as such, never stored cut)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    if not 0 <= value <= _COUNT_MAX:
        raise _fail(LinkState.BAD_ANSWER, f"a count is out of range ({value})")
    return value


# --- the wire -------------------------------------------------------------------------------


def _open(address: str, *, token: str | None, timeout: float) -> GatewaySession:
    try:
        url = gateway_ws_url(address)
    except ValueError as exc:
        raise _fail(LinkState.UNREACHABLE, str(exc)) from exc
    try:
        ws = connect(url, open_timeout=timeout, close_timeout=1, max_size=_MAX_FRAME, proxy=None)
    except TimeoutError as exc:
        raise _fail(
            LinkState.TIMEOUT, f"no WebSocket handshake from {url} in {timeout:g}s"
        ) from exc
    except InvalidURI as exc:
        raise _fail(LinkState.UNREACHABLE, f"{url}: {exc}") from exc
    except InvalidHandshake as exc:
        # An HTTP server that is not a gateway (or a gateway path that is not /ws).
        raise _fail(LinkState.NOT_A_GATEWAY, f"{url}: {exc}") from exc
    except OSError as exc:
        raise _fail(LinkState.UNREACHABLE, f"{url}: {exc.strerror or exc}") from exc
    try:
        return _handshake(ws, url, token=token, timeout=timeout)
    except BaseException:
        _quiet_close(ws)
        raise


def _handshake(
    ws: ClientConnection, url: str, *, token: str | None, timeout: float
) -> GatewaySession:
    challenge = _recv(ws, timeout)
    if challenge.get("type") != "event" or challenge.get("event") != "connect.challenge":
        raise _fail(LinkState.NOT_A_GATEWAY, f"{url} sent no connect.challenge")
    params: dict[str, Any] = {
        "minProtocol": MIN_PROTOCOL,
        "maxProtocol": MAX_PROTOCOL,
        "role": "operator",
        "scopes": [READ_SCOPE, ADMIN_SCOPE],
        "client": {
            "id": "opensquilla-site",
            "displayName": "OpenSquilla site console",
            "version": "1",
            "platform": platform.system().lower() or "unknown",
            "mode": "operator",
        },
    }
    if token:
        params["auth"] = {"token": token}
    request_id = uuid.uuid4().hex
    _send(ws, {"type": "req", "id": request_id, "method": "connect", "params": params})
    frame = _recv(ws, timeout)
    if frame.get("type") == "res" and frame.get("ok") is False:
        raise _connect_error(frame.get("error"), token_sent=bool(token))
    if frame.get("type") != "hello-ok":
        raise _fail(LinkState.NOT_A_GATEWAY, f"{url} answered connect with {frame.get('type')!r}")
    hello = _hello(frame)
    if not MIN_PROTOCOL <= hello.protocol <= MAX_PROTOCOL:
        raise _fail(
            LinkState.PROTOCOL_UNSUPPORTED,
            f"the gateway chose protocol {hello.protocol}; this console speaks "
            f"{MIN_PROTOCOL}–{MAX_PROTOCOL}",
        )
    principal = hello.principal or {}
    auth_state = principal.get("authState")
    if auth_state == "invalid" or (auth_state in _GUEST_STATES and token):
        raise _fail(
            LinkState.TOKEN_REFUSED, "it connected us only as a rate-limited guest", "invalid"
        )
    if auth_state in _GUEST_STATES:
        raise _fail(LinkState.GUEST, "give the gateway's token to read its memory", "guest")
    return GatewaySession(ws=ws, hello=hello, timeout=timeout)


def _hello(frame: Mapping[str, Any]) -> GatewayHello:
    server = _mapping(frame.get("server"))
    features = _mapping(frame.get("features"))
    snapshot = _mapping(frame.get("snapshot"))
    protocol = frame.get("protocol")
    if not isinstance(protocol, int) or isinstance(protocol, bool):
        raise _fail(LinkState.NOT_A_GATEWAY, "hello-ok has no protocol version")
    methods = features.get("methods")
    principal = _mapping(frame.get("auth")).get("principal")
    return GatewayHello(
        protocol=protocol,
        server_version=str(server.get("version") or "unknown"),
        methods=frozenset(str(m) for m in methods) if isinstance(methods, list) else frozenset(),
        state_dir=_text(snapshot.get("state_dir")),
        auth_mode=_text(snapshot.get("auth_mode")),
        principal=dict(principal) if isinstance(principal, Mapping) else None,
    )


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _connect_error(error: Any, *, token_sent: bool) -> _Failed:
    code, text = _error_parts(error)
    if code == "UNAUTHORIZED":
        detail = text if token_sent else f"{text}; this gateway needs a token"
        return _fail(LinkState.TOKEN_REFUSED, detail, code)
    if "protocol" in text.lower():
        return _fail(
            LinkState.PROTOCOL_UNSUPPORTED,
            f"{text} (this console speaks {MIN_PROTOCOL}–{MAX_PROTOCOL})",
            code,
        )
    return _fail(LinkState.NOT_A_GATEWAY, f"connect refused: {code} {text}".strip(), code)


def _call_error(method: str, error: Any) -> _Failed:
    code, text = _error_parts(error)
    if code == "METHOD_NOT_FOUND":
        return _fail(LinkState.UNKNOWN_METHOD, text or method, code)
    if code in {"UNAUTHORIZED", "FORBIDDEN"}:
        return _fail(LinkState.FORBIDDEN, text or method, code)
    return _fail(LinkState.GATEWAY_ERROR, f"{method}: {code} {text}".strip(), code)


def _error_parts(error: Any) -> tuple[str, str]:
    if not isinstance(error, Mapping):
        return "", ""
    return str(error.get("code") or ""), str(error.get("message") or "")


def _quiet_close(ws: ClientConnection) -> None:
    # Closing a connection that already died must not turn an answer into an exception.
    with contextlib.suppress(Exception):
        ws.close()


def _send(ws: ClientConnection, frame: Mapping[str, Any]) -> None:
    try:
        ws.send(json.dumps(frame))
    except ConnectionClosed as exc:
        raise _fail(LinkState.UNREACHABLE, f"the connection closed: {exc}") from exc


def _recv(ws: ClientConnection, timeout: float) -> dict[str, Any]:
    try:
        raw = ws.recv(timeout=timeout)
    except TimeoutError as exc:
        raise _fail(LinkState.TIMEOUT, f"no frame in {timeout:.3g}s") from exc
    except ConnectionClosed as exc:
        raise _fail(LinkState.UNREACHABLE, f"the connection closed: {exc}") from exc
    try:
        frame = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise _fail(LinkState.NOT_A_GATEWAY, "a frame is not JSON") from exc
    if not isinstance(frame, dict):
        raise _fail(LinkState.NOT_A_GATEWAY, "a frame is not a JSON object")
    problem = unstorable(frame)
    if problem:
        raise _fail(LinkState.BAD_ANSWER, problem)
    return frame


_INT64 = (-(2**63), 2**63 - 1)


def unstorable(value: Any, *, _depth: int = 0) -> str | None:
    """Why ``value`` (a decoded frame) cannot be stored as sent, or None: every answer is
    checked here once, so a NUL (PostgreSQL text refuses it), an integer beyond 64 bits (no
    column holds it) or a non-finite number (JSON columns refuse it) is a recorded
    ``bad_answer``, never an error while storing."""
    if _depth > 64:
        return "the answer nests too deeply"
    if isinstance(value, str):
        return "a text holds a NUL character" if "\x00" in value else None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return None if _INT64[0] <= value <= _INT64[1] else "a number exceeds 64 bits"
    if isinstance(value, float):
        return None if math.isfinite(value) else "a number is not finite"
    if isinstance(value, Mapping):
        for key, item in value.items():
            problem = unstorable(key, _depth=_depth + 1) or unstorable(item, _depth=_depth + 1)
            if problem:
                return problem
        return None
    if isinstance(value, list):
        for item in value:
            problem = unstorable(item, _depth=_depth + 1)
            if problem:
                return problem
    return None


def _next_response(ws: ClientConnection, timeout: float, request_id: str) -> dict[str, Any]:
    # Events (tick, presence, health) interleave with answers; only our res counts. One
    # deadline for the whole wait, so a gateway that keeps ticking but never answers
    # still times out.
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _fail(LinkState.TIMEOUT, f"no answer in {timeout:g}s")
        frame = _recv(ws, left)
        if frame.get("type") == "res" and frame.get("id") == request_id:
            return frame
        if frame.get("type") == "ping":
            _send(ws, {"type": "pong"})
