"""Receipts, requeue plans and health API, plus the receipt-backed session routes.

Operations parse input, call one service or selector, and render. Requeue and acknowledge
answer 200 with the outcome, except ``not_found`` (404) and ``stale`` (409: the row changed
since the caller read it, nothing was done).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.urls import reverse
from ninja import Body, Query, Router, Status
from ninja.decorators import decorate_view

from opensquilla_site.auth import OPERATE, READ, Principal, principal
from opensquilla_site.exceptions import ConflictError, NotFoundError, ValidationFailed
from opensquilla_site.idempotency import run_idempotent
from opensquilla_site.limits import BULK_MAX_BODY_BYTES, body_limit
from opensquilla_site.pagination import keyset_page
from opensquilla_site.schemas import AUTH_ERRORS, READ_ERRORS, WRITE_ERRORS, errors
from opensquilla_site.timeutil import now_ms
from opensquilla_site.tokens import scope_allows
from sessions_app.gateways import known_gateway
from sessions_app.keys import canonicalize_session_key, normalize_agent_id
from sessions_app.selectors import get_session_or_404

from . import gateways, handover, health, ledger, requeue, restore, scrub, services
from .audit import Actor, acting_as
from .mirror.exposure import fleet_for_viewer, mirror_for_viewer
from .mirror.state import mirror_states
from .models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from .schemas import (
    RECEIPT_OUT_ATTRS,
    AcknowledgeIn,
    AcknowledgeOut,
    BulkOut,
    CheckpointIn,
    CheckpointPageQuery,
    CheckpointReadbackOut,
    CoverageOut,
    FlushOut,
    GatewayArchivesOut,
    GatewayListOut,
    HealthListOut,
    HealthOut,
    ReceiptBulkIn,
    ReceiptEventPageOut,
    ReceiptFilterSchema,
    ReceiptListQuery,
    ReceiptOut,
    ReceiptPageOut,
    ReceiptPatchIn,
    ReceiptUpsertIn,
    RequeueIn,
    RequeueOut,
    RequeuePlanIn,
    RequeuePlanOut,
    ScrubIn,
    TaskOut,
)
from .selectors import (
    current_checkpoint_coverage,
    get_receipt,
    page_receipts,
)
from .statuses import SCRUB_VERDICT_STATUSES

# Mounted under their prefixes in opensquilla_site/api.py: /receipts, /requeue-plans, /health,
# and /sessions (the receipt-backed session routes).
router = Router(tags=["receipts"])
plans_router = Router(tags=["receipts"])
health_router = Router(tags=["receipts"])
gateways_router = Router(tags=["gateways"])
session_receipts_router = Router(tags=["sessions"])


class StaleReceipt(ConflictError):
    code = "stale"


def _actor(caller: Principal) -> Actor:
    return Actor(name=caller.actor_name, surface="api")


def _receipts_url(**params: Any) -> str:
    return f"{reverse('api:list_receipts')}?{urlencode(params)}"


# --- receipts -------------------------------------------------------------------------------


@router.get(
    "",
    response={200: ReceiptPageOut, **errors(*AUTH_ERRORS, 404, 422)},
    auth=READ,
    operation_id="list_receipts",
)
def list_receipts(
    request: HttpRequest,
    filters: Query[ReceiptFilterSchema],
    page: Query[ReceiptListQuery],
) -> dict[str, Any]:
    """Newest first (``created_at``, then insertion order); follow ``next_cursor``."""
    result = page_receipts(filters.to_receipt_filter(), cursor=page.cursor, limit=page.limit)
    return {"items": result.rows, "next_cursor": result.next_cursor}


@router.put(
    "",
    response={200: ReceiptOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="upsert_receipt",
)
def upsert_receipt(request: HttpRequest, payload: ReceiptUpsertIn) -> MemoryDurableReceipt:
    """Insert, or overwrite the row with the same ``idempotency_key``; returns the stored row."""
    fields = payload.model_dump(exclude={"expected_session_id"})
    with acting_as(_actor(principal(request))):
        return ledger.upsert_memory_durable_receipt(
            MemoryDurableReceipt(**fields), expected_session_id=payload.expected_session_id
        )


@router.post(
    "/bulk",
    response={200: BulkOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="bulk_upsert_receipts",
)
@decorate_view(body_limit(BULK_MAX_BODY_BYTES))
def bulk_upsert_receipts(request: HttpRequest, payload: ReceiptBulkIn) -> HttpResponse:
    """Up to 1,000 unfenced upserts in one transaction: all are stored or none."""
    caller = principal(request)

    def act() -> Status[Any]:
        rows = [MemoryDurableReceipt(**item.model_dump()) for item in payload.receipts]
        with acting_as(_actor(caller)):
            stored = ledger.bulk_upsert_memory_durable_receipts(rows)
        # Plain dicts of the stored columns (the ``ReceiptOut`` keys): validating 1,000 rows
        # back through the schema cost more than the database write.
        results = [
            {
                "index": i,
                "receipt": {key: row.__dict__[attr] for key, attr in RECEIPT_OUT_ATTRS.items()},
            }
            for i, row in enumerate(stored)
        ]
        return Status(200, {"count": len(results), "results": results})

    result = run_idempotent(request, owner=caller.idempotency_owner, action=act)
    # Rendered directly: the body is already JSON-ready and shaped as ``BulkOut``.
    return HttpResponse(
        json.dumps(result.value),
        status=result.status_code,
        content_type="application/json; charset=utf-8",
    )


@router.get(
    "/{receipt_id}",
    response={200: ReceiptOut, **errors(*READ_ERRORS)},
    auth=READ,
    operation_id="get_receipt",
)
def get_receipt_detail(request: HttpRequest, receipt_id: str) -> MemoryDurableReceipt:
    return get_receipt(receipt_id)


@router.patch(
    "/{receipt_id}",
    response={200: ReceiptOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="update_receipt",
)
def update_receipt(
    request: HttpRequest, receipt_id: str, payload: ReceiptPatchIn
) -> MemoryDurableReceipt:
    with acting_as(_actor(principal(request))):
        return ledger.update_memory_durable_receipt(
            receipt_id, **payload.model_dump(exclude_unset=True)
        )


@router.get(
    "/{receipt_id}/events",
    response={200: ReceiptEventPageOut, **errors(*AUTH_ERRORS, 422)},
    auth=READ,
    operation_id="list_receipt_events",
)
def list_receipt_events(
    request: HttpRequest, receipt_id: str, page: Query[ReceiptListQuery]
) -> dict[str, Any]:
    """The audit timeline, oldest first. Events outlive a deleted receipt. Each names its
    ``gateway``; ``?gateway=NAME`` keeps that gateway's events only."""
    result = keyset_page(
        ReceiptEvent.objects.filter(receipt_id=receipt_id),
        cursor=page.cursor,
        limit=page.limit,
        newest_first=False,
    )
    return {"items": result.rows, "next_cursor": result.next_cursor}


def _checkpoint_payload(view: restore.RestoreView) -> dict[str, Any]:
    readback, comparison, receipt = view.readback, view.comparison, view.receipt
    return {
        "receipt_id": receipt.receipt_id,
        "gateway": receipt.gateway_id,
        "session_key": receipt.session_key,
        "session_id": receipt.session_id or "",
        "file": {
            "path": receipt.source_path or "",
            "state": view.file_state,
            "message": view.file_message,
            "size_read": readback.size,
            "sha256": readback.sha256,
            "hash_matches": readback.sha256 == receipt.content_hash,
            "complete": readback.complete,
            "bad_lines": [{"line": b.line_no, "error": b.error} for b in readback.bad_lines[:100]],
        },
        "event_count": readback.event_count,
        "entry_count": readback.entry_count,
        "offset": readback.offset,
        "limit": readback.limit,
        "next_offset": view.next_offset,
        "entries": [
            {
                **_event_dict(entry.message),
                "position": entry.position,
                "timestamp_ms": entry.message.timestamp_ms,
                "token_estimate": entry.message.token_estimate,
                "intact": entry.intact,
                "tool_calls": [_event_dict(call) for call in entry.tool_calls],
                "transcript_entry": comparison.matched.get(entry.position),
            }
            for entry in readback.entries
        ],
        "comparison": {
            "same": comparison.same,
            "checkpoint_only": comparison.checkpoint_only,
            "transcript_only": comparison.transcript_only,
            "transcript_entries": comparison.transcript_entries,
            "live_generation": comparison.live_generation,
            "session_exists": comparison.session_exists,
            "transcript_only_entries": [
                {"entry": t.ref, "role": t.role, "created_at": t.created_at, "preview": t.preview}
                for t in comparison.transcript_only_entries
            ],
        },
        "loss": view.loss.as_dict() if view.loss is not None else None,
    }


def _event_dict(event: Any) -> dict[str, Any]:
    return {
        "sequence": event.sequence,
        "event_id": event.event_id,
        "role": event.role,
        "tool_name": event.tool_name,
        "tool_call_id": event.tool_call_id,
        "content": event.content,
        "content_type": event.content_type,
        "intact": event.intact,
        "truncated": event.truncated,
    }


@router.get(
    "/{receipt_id}/checkpoint",
    response={200: CheckpointReadbackOut, **errors(*AUTH_ERRORS, 404, 409, 422)},
    auth=READ,
    operation_id="read_checkpoint",
)
def read_checkpoint(
    request: HttpRequest, receipt_id: str, page: Query[CheckpointPageQuery]
) -> dict[str, Any]:
    """A checkpoint receipt's JSONL read back as the conversation it saved, compared with the
    session generation's live transcript, with the loss report when the file is damaged.
    404 unknown receipt; 422 ``not_a_checkpoint``; 409 ``checkpoint_missing``,
    ``checkpoint_unreadable`` or ``checkpoint_elsewhere`` (another gateway's host), each with
    ``loss``."""
    view = restore.restore_checkpoint(receipt_id, offset=page.offset, limit=page.limit)
    return _checkpoint_payload(view)


def _download(name: str, chunks: Any, content_type: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type=content_type)
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in name) or "checkpoint"
    response["Content-Disposition"] = f'attachment; filename="{safe}"'
    return response


@router.get(
    "/{receipt_id}/checkpoint/jsonl",
    response={200: None, **errors(*AUTH_ERRORS, 404, 409, 422)},
    auth=READ,
    operation_id="download_checkpoint_jsonl",
)
def download_checkpoint_jsonl(request: HttpRequest, receipt_id: str) -> StreamingHttpResponse:
    """The checkpoint file exactly as stored (streamed); errors as ``read_checkpoint``."""
    name, chunks = restore.checkpoint_jsonl_stream(receipt_id)
    return _download(name, chunks, "application/x-ndjson")


@router.get(
    "/{receipt_id}/checkpoint/markdown",
    response={200: None, **errors(*AUTH_ERRORS, 404, 409, 422)},
    auth=READ,
    operation_id="download_checkpoint_markdown",
)
def download_checkpoint_markdown(request: HttpRequest, receipt_id: str) -> StreamingHttpResponse:
    """The conversation as Markdown (streamed); errors as ``read_checkpoint``."""
    name, chunks = restore.checkpoint_markdown_stream(receipt_id)
    return _download(name, chunks, "text/markdown; charset=utf-8")


@router.post(
    "/{receipt_id}/requeue",
    response={200: RequeueOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="requeue_receipt",
)
def requeue_receipt(
    request: HttpRequest, receipt_id: str, payload: RequeueIn = Body(default=None)
) -> Status[Any]:
    caller = principal(request)
    body = payload or RequeueIn(expected_status=None, expected_updated_at=None)

    def act() -> Status[Any]:
        result = requeue.requeue_receipt(
            receipt_id=receipt_id,
            actor=_actor(caller),
            reason=body.reason,
            expected_status=body.expected_status,
            expected_updated_at=body.expected_updated_at,
        ).to_dict()
        return _outcome_response(result)

    return run_idempotent(request, owner=caller.idempotency_owner, action=act)


@router.post(
    "/{receipt_id}/acknowledge",
    response={200: AcknowledgeOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="acknowledge_receipt",
)
def acknowledge_receipt(
    request: HttpRequest, receipt_id: str, payload: AcknowledgeIn
) -> Status[Any]:
    caller = principal(request)

    def act() -> Status[Any]:
        result = requeue.acknowledge_receipt(
            receipt_id=receipt_id,
            actor=_actor(caller),
            reason=payload.reason,
            expected_status=payload.expected_status,
            expected_updated_at=payload.expected_updated_at,
        ).to_dict()
        return _outcome_response(result)

    return run_idempotent(request, owner=caller.idempotency_owner, action=act)


def _outcome_response(result: dict[str, Any]) -> Status[Any]:
    if result["outcome"] == "not_found":
        raise NotFoundError(result["message"], extra=result)
    if result["outcome"] == "stale":
        raise StaleReceipt(result["message"], extra=result)
    return Status(200, result)


# --- requeue plans --------------------------------------------------------------------------


@plans_router.post(
    "",
    response={201: RequeuePlanOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="create_requeue_plan",
)
def create_requeue_plan(request: HttpRequest, payload: RequeuePlanIn) -> Status[Any]:
    """Freeze a filter and dry-run it: counts per outcome and sample rows. Nothing changes."""
    caller = principal(request)

    def act() -> Status[Any]:
        plan = requeue.create_requeue_plan(
            filters=payload.filters,
            receipt_ids=payload.receipt_ids,
            actor=_actor(caller),
            reason=payload.reason,
        )
        return Status(201, RequeuePlanOut.from_orm(plan))

    return run_idempotent(request, owner=caller.idempotency_owner, action=act)


@plans_router.get(
    "/{plan_id}",
    response={200: RequeuePlanOut, **errors(*READ_ERRORS)},
    auth=READ,
    operation_id="get_requeue_plan",
)
def get_requeue_plan(request: HttpRequest, plan_id: str) -> RequeuePlan:
    """The plan with its progress: ``state``, ``processed`` of ``total``, ``result_counts``."""
    return requeue.get_requeue_plan(plan_id)


@plans_router.post(
    "/{plan_id}/execute",
    response={202: RequeuePlanOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="execute_requeue_plan",
)
def execute_requeue_plan(request: HttpRequest, plan_id: str) -> Status[Any]:
    """Queue the plan once; executing a queued, running or done plan again changes nothing."""
    caller = principal(request)

    def act() -> Status[Any]:
        plan = requeue.start_requeue_plan(plan_id=plan_id, actor=_actor(caller))
        return Status(202, RequeuePlanOut.from_orm(plan))

    return run_idempotent(request, owner=caller.idempotency_owner, action=act)


# --- health ---------------------------------------------------------------------------------


@health_router.get(
    "",
    response={200: HealthListOut, **errors(*AUTH_ERRORS, 404, 422)},
    auth=READ,
    operation_id="list_health",
)
def list_health(request: HttpRequest) -> dict[str, Any]:
    """Memory safety and repair backlog (docs/UPSTREAM.md#health) for every (gateway, agent) in
    the ledger (``?gateway=NAME``: that gateway's agents only), and the state of the live
    OpenSquilla mirror (``mirror``: source, last sync, lag, errors; docs/MIRROR.md)."""
    states = mirror_states()
    return {"items": health.health_by_agent(), "mirror": _shown(request, states, mirror_for_viewer)}


@health_router.get(
    "/{agent_id}",
    response={200: HealthOut, **errors(*AUTH_ERRORS, 404, 422)},
    auth=READ,
    operation_id="get_health",
)
def get_health(request: HttpRequest, agent_id: str) -> dict[str, Any]:
    """One agent's health over every gateway (``gateway`` null), or over the one
    ``?gateway=NAME`` names."""
    return health.memory_health(normalize_agent_id(agent_id))


# --- gateways -------------------------------------------------------------------------------


@gateways_router.get(
    "",
    response={200: GatewayListOut, **errors(*AUTH_ERRORS, 404, 422)},
    auth=READ,
    operation_id="list_gateways",
)
def list_gateways(request: HttpRequest) -> dict[str, Any]:
    """Every gateway (``?gateway=NAME``: that one): name, display name, source, OpenSquilla
    version and schema last seen, mirror state, and at-risk counts with the filter that lists
    each (docs/API.md, "Gateways")."""
    return {"items": _shown(request, gateways.fleet(), fleet_for_viewer)}


def _shown(request: HttpRequest, rows: Any, for_viewer: Any) -> Any:
    """``rows`` as the caller may read them: a ``read``-scope caller (a viewer) gets no
    paths, follower hosts or raw errors (receipts_app/mirror/exposure.py)."""
    return rows if scope_allows(principal(request).scope, "operate") else for_viewer(rows)


@gateways_router.get(
    "/{name}/archives",
    response={200: GatewayArchivesOut, **errors(*AUTH_ERRORS, 404, 422)},
    auth=READ,
    operation_id="list_gateway_archives",
)
def list_gateway_archives(request: HttpRequest, name: str) -> dict[str, Any]:
    """The raw-fallback archives gateway ``name`` left undistilled when its upgrade to 0.5.5+
    retired its repair pipeline, per agent, and who repairs its rows now (docs/API.md,
    "Gateways")."""
    gateway = known_gateway(name)  # 422 for a name that is not a slug, 404 for none
    repairs = handover.repairs_of(gateway)
    return {
        "gateway": gateway.name,
        "repairs": repairs,
        "repairs_label": handover.REPAIRS_LABELS[repairs],
        "ledger_retired_at": gateway.ledger_retired_at,
        "agents": [group.to_dict() for group in handover.undistilled_archives(gateway.name)],
    }


@gateways_router.post(
    "/{name}/scrub",
    response={202: TaskOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="scrub_checkpoints",
)
def scrub_gateway(
    request: HttpRequest, name: str, payload: ScrubIn = Body(default=None)
) -> Status[Any]:
    """Verify the gateway's checkpoint files now (one agent's with ``agent``), on the worker that
    holds them (202 with the task id). ``status_url`` lists the gateway's checkpoints the scrub
    found missing or damaged (docs/STATUSES.md#scrub)."""
    caller = principal(request)
    agent = payload.agent if payload else None
    full = bool(payload.full) if payload else False

    def act() -> Status[Any]:
        try:
            with acting_as(_actor(caller)):
                asked = scrub.request_scrub(name, agent, full=full)
        except KeyError as exc:
            raise NotFoundError(str(exc.args[0] if exc.args else exc)) from exc
        except ValueError as exc:
            raise ValidationFailed(str(exc)) from exc
        params: dict[str, Any] = {
            "gateway": asked.gateway,
            "scope": "checkpoint",
            "status": ",".join(SCRUB_VERDICT_STATUSES),
        }
        if asked.agent:
            params["agent"] = asked.agent
        url = _receipts_url(**params)
        return Status(202, TaskOut(task_id=asked.task_id, status_url=url, warning=asked.warning))

    return run_idempotent(request, owner=caller.idempotency_owner, action=act)


# --- receipt-backed session routes ----------------------------------------------------------


@session_receipts_router.post(
    "/{sessionkey:key}/checkpoints",
    response={200: ReceiptOut, 202: TaskOut, **errors(*WRITE_ERRORS, 503)},
    auth=OPERATE,
    operation_id="create_checkpoint",
)
def create_checkpoint(
    request: HttpRequest, key: str, wait: bool = False, payload: CheckpointIn = Body(default=None)
) -> Status[Any]:
    """Queue a checkpoint of the live transcript (202 with the task id).

    With ``?wait=true`` the checkpoint runs inside this request, as the worker would run it,
    and the stored receipt comes back: ``checkpoint_saved``, or ``checkpoint_failed`` with
    the reason when the write failed.
    """
    caller = principal(request)
    turn_id = payload.turn_id if payload else None

    def act() -> Status[Any]:
        if wait:
            return Status(
                200,
                ReceiptOut.from_orm(
                    services.checkpoint_now(session_key=key, actor=_actor(caller), turn_id=turn_id)
                ),
            )
        started = now_ms()
        task_id = services.queue_checkpoint(session_key=key, actor=_actor(caller), turn_id=turn_id)
        url = _receipts_url(
            session_key=canonicalize_session_key(key), scope="checkpoint", updated_from=started
        )
        warning = services.queued_work_warning()
        return Status(202, TaskOut(task_id=task_id, status_url=url, warning=warning))

    return run_idempotent(request, owner=caller.idempotency_owner, action=act)


@session_receipts_router.post(
    "/{sessionkey:key}/flush",
    response={200: FlushOut, 202: TaskOut, **errors(*WRITE_ERRORS)},
    auth=OPERATE,
    operation_id="flush_session",
)
def flush_session(request: HttpRequest, key: str, wait: bool = False) -> Status[Any]:
    """Queue a flush (202 with the task id); ``?wait=true`` runs it in this request and
    returns the flush outcome with the ledger rows it wrote."""
    caller = principal(request)

    def act() -> Status[Any]:
        started = now_ms()
        canonical = canonicalize_session_key(key)
        if not wait:
            task_id = services.queue_flush(session_key=key, actor=_actor(caller))
            url = _receipts_url(session_key=canonical, updated_from=started)
            warning = services.queued_work_warning()
            return Status(202, TaskOut(task_id=task_id, status_url=url, warning=warning))
        outcome, written = services.flush_now(session_key=key, actor=_actor(caller))
        flushed = FlushOut(
            mode=str(outcome.mode),
            result_status=str(outcome.result_status),
            flushed_paths=list(outcome.flushed_paths),
            message_count=outcome.message_count,
            raw_reason=str(outcome.raw_reason) if outcome.raw_reason else None,
            error=outcome.error,
            receipts=[ReceiptOut.from_orm(r) for r in written],
        )
        return Status(200, flushed)

    return run_idempotent(request, owner=caller.idempotency_owner, action=act)


@session_receipts_router.get(
    "/{sessionkey:key}/coverage",
    response={200: CoverageOut, **errors(*READ_ERRORS)},
    auth=READ,
    operation_id="get_session_coverage",
)
def get_session_coverage(request: HttpRequest, key: str) -> dict[str, Any]:
    """Whether a saved checkpoint covers the live transcript exactly (docs/UPSTREAM.md#what-gates-destructive-operations)."""
    session = get_session_or_404(key)
    receipt, entry_count = current_checkpoint_coverage(session)
    return {
        "session_key": session.session_key,
        "session_id": session.session_id,
        "entry_count": entry_count,
        "covered": receipt is not None,
        "receipt": receipt,
    }
