"""The gateway link wired in: read every linked gateway on a schedule, store what it said,
and ask one to run its due repairs (docs/MIRROR.md#gateway-link).

- :func:`refresh_gateway_links` is the beat task's body: for every gateway with an RPC
  address it connects once, asks ``doctor.memory.status`` (deep) for each agent, and stores
  the answer with its time (``GatewayLink``, ``GatewayMemoryVerdict``). It never raises: each
  way a gateway can fail is stored as the link's state and message.
- :func:`request_gateway_repairs` is the admin's "ask the gateway to run its due repairs": a
  page only queues it (the task ``operations_app.tasks.run_gateway_repairs``), so no web
  worker ever waits on a gateway; the worker's :func:`run_gateway_repairs` calls
  ``memory.repair.run`` with a short timeout (``OPENSQUILLA_GATEWAY_REPAIR_TIMEOUT``) and
  records the answer in the audit trail, one event for the run (naming the agent, how many
  ran and which receipts) and one on each receipt the gateway names.
- Before any connection, the server's own bounds (``sessions_app.link_policy``): an address
  or token variable they refuse is the stored state ``refused``, and nothing is sent.

Pages read the stored rows only (:mod:`.views`); nothing here runs during a page render.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from opensquilla_site.acting import Actor, acting_as
from opensquilla_site.timeutil import now_ms
from receipts_app import audit
from receipts_app.counts import receipt_counts
from receipts_app.models import MemoryDurableReceipt
from sessions_app.gateways import Gateway, known_gateway
from sessions_app.keys import normalize_agent_id
from sessions_app.link_policy import address_refusal

from ..models import GatewayLink, GatewayMemoryVerdict
from .capabilities import unanswered_methods
from .client import DEFAULT_TIMEOUT, read_memory_status, run_due_repairs
from .client import REPAIR_RUN as REPAIR_RUN_METHOD
from .config import LinkConfigError, apply_configured_links
from .states import LinkAnswer, LinkFailure, LinkState, MemoryVerdict

logger = logging.getLogger(__name__)

DEFAULT_AGENT = "main"
REPAIR_RUN_ACTION = "gateway_repair_run"
REPAIR_RUN_TASK = "operations_app.tasks.run_gateway_repairs"
QUEUED = "queued"
# The audit event's outcome column is short; a gateway's result status is kept whole in details.
_OUTCOME_MAX = 32
# A gateway names its receipts by our column's ids; a longer "id" cannot be one of ours.
RECEIPT_ID_MAX = MemoryDurableReceipt._meta.get_field("receipt_id").max_length or 128


def link_timeout() -> float:
    return float(getattr(settings, "OPENSQUILLA_GATEWAY_LINK_TIMEOUT", 5.0) or DEFAULT_TIMEOUT)


def repair_timeout() -> float:
    return float(getattr(settings, "OPENSQUILLA_GATEWAY_REPAIR_TIMEOUT", 20.0) or 20.0)


def link_refusal(gateway: Gateway) -> LinkFailure | None:
    """Why this server's settings refuse to connect to ``gateway`` (None: they allow it)."""
    reason = gateway.token_env_refusal or address_refusal(gateway.rpc_address)
    return LinkFailure(LinkState.REFUSED, reason) if reason else None


def linked_gateways() -> list[Gateway]:
    return list(Gateway.objects.exclude(rpc_address="").order_by("name"))


def agents_of(gateway: Gateway) -> list[str]:
    """The agents to ask about: every agent with receipts of this gateway here, the agents
    asked before, and ``main`` (the gateway's default agent)."""
    agents = {DEFAULT_AGENT}
    agents.update(r.agent_id for r in receipt_counts() if r.gateway_id == gateway.name)
    agents.update(
        GatewayMemoryVerdict.objects.filter(gateway_id=gateway.name).values_list(
            "agent_id", flat=True
        )
    )
    return sorted(a for a in agents if a)


# --- reading on a schedule ----------------------------------------------------------------


@dataclass
class RefreshSummary:
    states: dict[str, str] = field(default_factory=dict)  # gateway -> link state
    config_error: str = ""


def refresh_gateway_links(*, timeout: float | None = None) -> RefreshSummary:
    """Read every linked gateway once; never raises (a broken gateway is a stored state)."""
    out = RefreshSummary()
    try:
        apply_configured_links()
    except LinkConfigError as exc:
        # The gateways linked in the admin are still read; the log says what is wrong.
        out.config_error = str(exc)
        logger.error("gateway link configuration: %s", exc)
    gateways = linked_gateways()
    # A gateway whose address was removed is no longer linked: its readings go with it.
    names = [g.name for g in gateways]
    GatewayLink.objects.exclude(gateway_id__in=names).delete()  # verdicts cascade
    for gateway in gateways:
        try:
            out.states[gateway.name] = refresh_gateway(gateway, timeout=timeout).state
        except Exception as exc:  # noqa: BLE001 - one gateway must not stop the others
            logger.exception("gateway link %s could not be stored", gateway.name)
            out.states[gateway.name] = f"error: {type(exc).__name__}"
    return out


def refresh_gateway(gateway: Gateway, *, timeout: float | None = None) -> GatewayLink:
    """Ask ``gateway`` for each agent's verdict and store the answer with its time."""
    agents = agents_of(gateway)
    refused = link_refusal(gateway)
    if refused is not None:
        return store_answer(gateway, agents, LinkAnswer(failure=refused))
    answer = read_memory_status(
        gateway.rpc_address,
        agent_ids=agents,
        token=gateway.link_token(),
        deep=True,
        timeout=timeout if timeout is not None else link_timeout(),
    )
    return store_answer(gateway, agents, answer)


def _link_failure(
    answer: LinkAnswer[dict[str, LinkAnswer[MemoryVerdict]]],
) -> LinkFailure | None:
    """The link's own failure; when every agent failed the same way, that is the link's too
    (a token without ``operator.read`` is refused on each call, not at connect)."""
    if answer.failure is not None:
        return answer.failure
    failures = [a.failure for a in (answer.value or {}).values()]
    if failures and all(f is not None for f in failures):
        return failures[0]
    return None


@transaction.atomic
def store_answer(
    gateway: Gateway,
    agents: list[str],
    answer: LinkAnswer[dict[str, LinkAnswer[MemoryVerdict]]],
    *,
    now: int | None = None,
) -> GatewayLink:
    now = now_ms() if now is None else now
    failure = _link_failure(answer)
    previous = GatewayLink.objects.filter(gateway=gateway).first()
    hello = answer.hello
    values: dict[str, Any] = {
        "address": gateway.rpc_address,
        "checked_at": now,
        "state": LinkState.OK.value if failure is None else failure.state.value,
        "message": answer.message if failure is None else failure.message,
        "error_code": (failure.code or "") if failure is not None else "",
    }
    if failure is None:
        values["ok_at"] = now
        values["failing_since"] = None
    elif previous is None or previous.failing_since is None:
        values["failing_since"] = now
    if hello is not None:
        values.update(
            server_version=hello.server_version[:64],
            protocol=hello.protocol,
            methods=sorted(hello.methods),
            scopes=None if hello.scopes is None else sorted(hello.scopes),
            state_dir=hello.state_dir or "",
        )
    link, _ = GatewayLink.objects.update_or_create(gateway=gateway, defaults=values)
    per_agent = answer.value or {}
    for agent in agents:
        own = per_agent.get(agent)
        _store_verdict(gateway, agent, own, failure if own is None else own.failure, now)
    return link


def _store_verdict(
    gateway: Gateway,
    agent: str,
    own: LinkAnswer[MemoryVerdict] | None,
    failure: LinkFailure | None,
    now: int,
) -> None:
    values: dict[str, Any] = {"read_at": now}
    verdict = own.value if own is not None else None
    if failure is None and verdict is not None:
        values.update(
            answered_at=now,
            state=LinkState.OK.value,
            message="",
            error_code="",
            memory_safety=verdict.memory_safety[:32],
            repair_status=verdict.repair_status[:32],
            repair_backlog_count=verdict.repair_backlog,
            pending_repair_count=verdict.pending_repairs,
            repair_failures=list(verdict.repair_failures),
            raw_fallback_count=verdict.raw_fallbacks,
            payload=verdict.payload,
        )
    else:
        # Keep the last answer's numbers (shown with their age); say why there is no newer one.
        failed = failure or LinkFailure(LinkState.GATEWAY_ERROR, "no answer for this agent")
        values.update(
            state=failed.state.value, message=failed.message, error_code=failed.code or ""
        )
    GatewayMemoryVerdict.objects.update_or_create(
        gateway_id=gateway.name, agent_id=agent, defaults=values
    )


# --- asking the gateway to run its due repairs --------------------------------------------


@dataclass(frozen=True)
class RepairRunOutcome:
    state: str
    message: str
    results: tuple[dict[str, Any], ...] = ()
    recorded: int = 0  # receipts of ours the gateway named (each got an audit event)

    @property
    def ok(self) -> bool:
        return self.state == LinkState.OK.value


class RepairRunRefused(ValueError):
    """The link cannot ask this gateway to repair (not linked, method or scope missing)."""


def check_can_run_repairs(gateway_name: str) -> tuple[Gateway, GatewayLink]:
    """The gateway and its stored link, when its last reading allows a repair run; raises
    ``KeyError`` (unknown gateway) or ``RepairRunRefused`` saying why not."""
    gateway = known_gateway(gateway_name)
    link = GatewayLink.objects.filter(gateway=gateway).first()
    if not gateway.rpc_address or link is None:
        raise RepairRunRefused(f"gateway {gateway.name} is not linked (no RPC address read yet)")
    gone = unanswered_methods(
        link.server_version, ledger_retired=gateway.ledger_retired_at is not None
    )
    if REPAIR_RUN_METHOD in gone:
        raise RepairRunRefused(
            f"gateway {gateway.name} no longer answers {REPAIR_RUN_METHOD}: its upgrade to "
            "OpenSquilla 0.5.5+ removed the repair pipeline"
        )
    if not link.can_run_repairs:
        raise RepairRunRefused(
            f"gateway {gateway.name} does not offer memory.repair.run to this token "
            f"(link {link.state}; it needs operator.admin)"
        )
    return gateway, link


def request_gateway_repairs(gateway_name: str, agent_id: str, *, actor: Actor) -> str:
    """Queue "run due repairs" for ``agent_id`` on the gateway; returns what the page says.

    Raises ``KeyError`` / ``RepairRunRefused`` (see ``check_can_run_repairs``, and the
    server's bounds on the link) before queueing. The request is an audit event of its own
    (outcome ``queued``); the worker's run records the answer."""
    gateway, _link = check_can_run_repairs(gateway_name)
    refused = link_refusal(gateway)
    if refused is not None:
        raise RepairRunRefused(f"gateway {gateway.name}: {refused.message}")
    agent = normalize_agent_id(agent_id or DEFAULT_AGENT)
    details = {"via": "gateway_link", "gateway": gateway.name, "agent": agent}
    with acting_as(actor), transaction.atomic():
        audit.record_event(receipt_id="", action=REPAIR_RUN_ACTION, outcome=QUEUED, details=details)
        transaction.on_commit(lambda: _publish_repair_run(gateway.name, agent, actor))
    return (
        f"asked gateway {gateway.name} to run its due repairs for agent {agent}: queued; "
        "the outcome appears in the audit trail when the gateway answers"
    )


def _publish_repair_run(gateway: str, agent: str, actor: Actor) -> None:
    from celery import current_app

    try:
        # By name: operations_app.tasks imports this module, not the other way round.
        current_app.tasks[REPAIR_RUN_TASK].apply_async(
            kwargs={"gateway": gateway, "agent": agent, "actor": [actor.name, actor.surface]}
        )
    except Exception as exc:  # noqa: BLE001 - an unreachable broker is an outcome, recorded
        logger.warning("could not queue the repair run of gateway %s", gateway, exc_info=True)
        with acting_as(actor):
            audit.record_event(
                receipt_id="",
                gateway=gateway,
                action=REPAIR_RUN_ACTION,
                outcome="not_queued",
                reason=f"the broker refused the work: {type(exc).__name__}",
                details={"via": "gateway_link", "gateway": gateway, "agent": agent},
            )


def run_gateway_repairs(
    gateway_name: str, agent_id: str, *, actor: Actor, timeout: float | None = None
) -> RepairRunOutcome:
    """Ask the gateway to run its due repairs for ``agent_id`` and audit its answer (the
    worker's half of :func:`request_gateway_repairs`).

    Raises ``KeyError`` / ``RepairRunRefused`` before calling (see ``check_can_run_repairs``);
    every failure of the call itself, a refusal by the server's settings and an answer that
    cannot be stored included, is an outcome, recorded like a success."""
    gateway, _link = check_can_run_repairs(gateway_name)
    agent = normalize_agent_id(agent_id or DEFAULT_AGENT)
    refused = link_refusal(gateway)
    if refused is not None:
        answer: LinkAnswer[Any] = LinkAnswer(failure=refused)
    else:
        answer = run_due_repairs(
            gateway.rpc_address,
            agent_id=agent,
            token=gateway.link_token(),
            timeout=repair_timeout() if timeout is None else timeout,
        )
    results = answer.value.results if answer.value is not None else ()
    receipt_ids = _receipt_ids(results)
    with acting_as(actor), transaction.atomic():
        audit.record_event(
            receipt_id="",
            gateway=gateway.name,
            action=REPAIR_RUN_ACTION,
            outcome=answer.state.value[:_OUTCOME_MAX],
            reason=None if answer.ok else answer.message,
            details={
                "via": "gateway_link",
                "gateway": gateway.name,
                "agent": agent,
                "count": len(results),
                "receipt_ids": receipt_ids,
            },
        )
        recorded = _record_results(gateway, agent, results)
    if answer.ok:
        message = (
            f"gateway {gateway.name} ran {len(results)} due repair{'s' if len(results) != 1 else ''}"
            f" for agent {agent}" + (f"; {recorded} of them on receipts here" if results else "")
        )
    else:
        message = f"gateway {gateway.name}: {answer.message}"
    return RepairRunOutcome(answer.state.value, message, tuple(results), recorded)


def _receipt_ids(results: tuple[dict[str, Any], ...]) -> list[str]:
    # Only ids a receipt of ours could have (text within the column); others are not ours.
    return [
        r["receiptId"]
        for r in results
        if isinstance(r.get("receiptId"), str) and 0 < len(r["receiptId"]) <= RECEIPT_ID_MAX
    ]


def _record_results(gateway: Gateway, agent: str, results: tuple[dict[str, Any], ...]) -> int:
    ids = _receipt_ids(results)
    ours = {
        row.receipt_id: row
        for row in MemoryDurableReceipt.objects.filter(gateway_id=gateway.name, receipt_id__in=ids)
    }
    events = []
    for result in results:
        receipt_id = result.get("receiptId")
        row = ours.get(receipt_id) if isinstance(receipt_id, str) else None
        if row is None or not isinstance(receipt_id, str):
            continue  # a row only the gateway has (e.g. its legacy raw-fallback import)
        status = _text(result.get("status"))
        events.append(
            audit.build_event(
                receipt_id=receipt_id,
                session_key=row.session_key,
                gateway=gateway.name,
                action=REPAIR_RUN_ACTION,
                from_status=row.status,
                outcome=status[:_OUTCOME_MAX] or None,
                reason=_text(result.get("reason")) or None,
                details={
                    "via": "gateway_link",
                    "gateway": gateway.name,
                    "agent": agent,
                    "result": result,
                },
            )
        )
    audit.record_events(events)
    return len(events)


def _text(value: Any) -> str:
    # A gateway's words for a result; anything but text (a number, an object) as JSON text.
    return value if isinstance(value, str) else ("" if value is None else str(value))
