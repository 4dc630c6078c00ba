"""What a call to a gateway came back with: one state, one message, never an exception.

A page or a beat task asks the link and shows (or stores) ``state`` and ``message``; every
way a gateway can fail maps to exactly one state here, so no caller needs its own
``try``/``except`` around the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LinkState(StrEnum):
    OK = "ok"
    UNREACHABLE = "unreachable"  # nothing listens, DNS failed, or the connection dropped
    TIMEOUT = "timeout"  # connected, but no answer in time
    NOT_A_GATEWAY = "not_a_gateway"  # something answered, but not OpenSquilla's protocol
    PROTOCOL_UNSUPPORTED = "protocol_unsupported"  # no protocol version we both speak
    TOKEN_REFUSED = "token_refused"  # the token was rejected (or one is required)
    GUEST = "guest"  # connected, but only as an unauthenticated guest
    FORBIDDEN = "forbidden"  # the principal lacks the scope the method needs
    UNKNOWN_METHOD = "unknown_method"  # this gateway does not offer the method
    GATEWAY_ERROR = "gateway_error"  # the method ran and reported an error
    # This server's settings refuse the link (address or token variable; link_policy): no
    # connection is made.
    REFUSED = "refused"
    # The answer cannot be stored as sent (a NUL, a number beyond 64 bits, a wrong type).
    BAD_ANSWER = "bad_answer"


# The messages an operator reads, one per state; ``detail`` adds the specifics.
STATE_MESSAGES: dict[LinkState, str] = {
    LinkState.OK: "the gateway answered",
    LinkState.UNREACHABLE: "the gateway cannot be reached",
    LinkState.TIMEOUT: "the gateway did not answer in time",
    LinkState.NOT_A_GATEWAY: "the address does not answer as an OpenSquilla gateway",
    LinkState.PROTOCOL_UNSUPPORTED: "the gateway speaks a protocol version this console does not",
    LinkState.TOKEN_REFUSED: "the gateway refused the token",
    LinkState.GUEST: "the gateway connected us only as a guest",
    LinkState.FORBIDDEN: "the token lacks the scope this needs",
    LinkState.UNKNOWN_METHOD: "this gateway does not offer the method",
    LinkState.GATEWAY_ERROR: "the gateway reported an error",
    LinkState.REFUSED: "this server's settings refuse the link",
    LinkState.BAD_ANSWER: "the gateway's answer cannot be stored",
}

# What a viewer reads of the link: whether it reaches the gateway, never the connection's
# error, address or paths (those are for operators and admins).
REACHABILITY: dict[LinkState, str] = {
    LinkState.OK: "reachable",
    LinkState.UNREACHABLE: "unreachable",
    LinkState.TIMEOUT: "unreachable",
    LinkState.NOT_A_GATEWAY: "not a gateway",
    LinkState.PROTOCOL_UNSUPPORTED: "not a gateway",
    LinkState.TOKEN_REFUSED: "token refused",
    LinkState.GUEST: "token refused",
    LinkState.FORBIDDEN: "reachable",
    LinkState.UNKNOWN_METHOD: "reachable",
    LinkState.GATEWAY_ERROR: "reachable",
    LinkState.REFUSED: "refused by settings",
    LinkState.BAD_ANSWER: "reachable",
}


def reachability(state: str) -> str:
    """The link's reachability word for a stored state (unknown states read "unknown")."""
    try:
        return REACHABILITY[LinkState(state)]
    except ValueError:
        return "unknown"


@dataclass(frozen=True)
class LinkFailure:
    state: LinkState
    detail: str = ""
    code: str | None = None  # the gateway's own error code, when it sent one

    @property
    def message(self) -> str:
        base = STATE_MESSAGES[self.state]
        return f"{base}: {self.detail}" if self.detail else base


@dataclass(frozen=True)
class GatewayHello:
    """What ``hello-ok`` said about the gateway and about us."""

    protocol: int
    server_version: str
    methods: frozenset[str]
    state_dir: str | None
    auth_mode: str | None
    # ``auth.principal`` (protocol 4); 0.3.0's hello carries none, so it is unknown there.
    principal: dict[str, Any] | None = None

    @property
    def scopes(self) -> frozenset[str] | None:
        if self.principal is None:
            return None
        return frozenset(str(s) for s in self.principal.get("scopes") or ())

    def offers(self, method: str) -> bool:
        return method in self.methods


@dataclass(frozen=True)
class MemoryVerdict:
    """One agent's ``doctor.memory.status``: the gateway's own view of its memory."""

    agent_id: str
    memory_safety: str  # "ok" | "error"
    repair_status: str  # "healthy" | "degraded" | "warning"
    repair_backlog: int
    # Only with ``deep``: degraded compactions, their failures, raw archives on disk.
    pending_repairs: int | None = None
    repair_failures: tuple[dict[str, Any], ...] = ()
    raw_fallbacks: int | None = None
    payload: dict[str, Any] = field(default_factory=dict, repr=False)


@dataclass(frozen=True)
class RepairRun:
    """``memory.repair.run``: what the gateway repaired, row by row (``results[]``)."""

    agent_id: str
    results: tuple[dict[str, Any], ...]

    @property
    def count(self) -> int:
        return len(self.results)


@dataclass(frozen=True)
class LinkAnswer(Generic[T]):
    """A call's outcome: ``value`` when ``state`` is OK, else ``failure`` says why."""

    value: T | None = None
    failure: LinkFailure | None = None
    hello: GatewayHello | None = None

    @property
    def state(self) -> LinkState:
        return LinkState.OK if self.failure is None else self.failure.state

    @property
    def message(self) -> str:
        return STATE_MESSAGES[LinkState.OK] if self.failure is None else self.failure.message

    @property
    def ok(self) -> bool:
        return self.failure is None
