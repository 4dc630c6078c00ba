"""Receipts list, live "N new" banner, receipt detail, and the single requeue/acknowledge."""

from __future__ import annotations

from typing import cast

from django.contrib import messages
from django.db.models import Q
from django.http import HttpResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from opensquilla_site.exceptions import ValidationFailed
from opensquilla_site.pagination import decode_cursor, encode_cursor

from ...flush_outcome import flush_outcome_for_row
from ...mirror.exposure import marks_for_viewer
from ...models import MemoryDurableReceipt
from ...requeue import AckOutcome, acknowledge_receipt, available_actions, requeue_receipt
from ...requeue.rules import requeueable_receipt_ids
from ...restore import (
    CheckpointElsewhere,
    CheckpointMissing,
    CheckpointUnreadable,
    NotACheckpoint,
    checkpoint_jsonl_stream,
    checkpoint_markdown_stream,
    restore_checkpoint,
)
from ...restore.service import PAGE_SIZE, PAGE_SIZE_MAX
from ...selectors import (
    COUNT_CAP,
    ReceiptFilter,
    capped_count,
    filter_receipts,
    get_receipt,
    page_receipts,
    tab_counts,
)
from ...statuses import FAILURE_STATUSES, KNOWN_SCOPES, KNOWN_STATUSES
from .. import selectors as cs
from ..helpers import (
    CHANGED_EVENT,
    OPERATE_PERM,
    VIEW_PERM,
    HtmxHttpRequest,
    can_operate,
    console_actor,
    int_param,
    operator_note,
    outcome_text,
    render_error,
    render_fragment,
    render_page,
    shown_to,
)
from ..helpers import console_view as _console_view
from ..receipt_rows import present_rows, spans_gateways

NEW_ROWS_CAP = 999
LIST_TEMPLATE = "console/receipts.html"
DETAIL_TEMPLATE = "console/receipt_detail.html"
# The fragments an action may ask to get back, by the name of its partial.
ROW_FRAGMENT = "receipt-row"
DETAIL_FRAGMENT = "receipt-detail"


def _parse_filter(request: HtmxHttpRequest) -> tuple[ReceiptFilter | None, ValidationFailed | None]:
    try:
        return ReceiptFilter.from_params(request.GET), None
    except ValidationFailed as exc:
        return None, exc


def _pairs(params: dict) -> list[tuple[str, str]]:
    """Flatten ``to_params()`` into (name, value) pairs for hidden form inputs."""
    out: list[tuple[str, str]] = []
    for key, value in params.items():
        for item in value if isinstance(value, list) else [value]:
            out.append((key, str(item)))
    return out


@require_GET
@_console_view(VIEW_PERM)
def receipt_list(request: HtmxHttpRequest) -> HttpResponse:
    receipt_filter, error = _parse_filter(request)
    limit = int_param(request, "limit", 50, lo=10, hi=200)
    context: dict = {
        "known_statuses": KNOWN_STATUSES,
        "failure_statuses": FAILURE_STATUSES,
        "known_scopes": KNOWN_SCOPES,
        "can_operate": can_operate(request.user),
        "requeueable": set(),
        "limit": limit,
        "filter_error": error,
        "count_cap": COUNT_CAP,
    }
    status = 200
    if receipt_filter is None:
        status = 400
        context.update(rows=[], next_cursor=None, counts={}, filter=ReceiptFilter(), total=0)
    else:
        unknown = [s for s in receipt_filter.statuses if s not in KNOWN_STATUSES]
        try:
            page = page_receipts(
                receipt_filter, cursor=request.GET.get("cursor"), limit=limit, for_console=True
            )
        except ValidationFailed as exc:  # a forged or garbled cursor
            return render_error(request, exc.message, status=400)
        tabs = tab_counts(receipt_filter)
        context.update(
            filter=receipt_filter,
            filter_pairs=_pairs(receipt_filter.to_params()),
            rows=present_rows(page.rows, show_gateway=spans_gateways(request, page.rows)),
            # The row button appears where the requeue rules would act (one query a page).
            requeueable=requeueable_receipt_ids(page.rows) if context["can_operate"] else set(),
            next_cursor=page.next_cursor,
            counts=tabs.per_status,
            total=tabs.total,
            count_cap=0 if tabs.exact else COUNT_CAP,
            unknown_statuses=unknown,
            newest_marker=(
                encode_cursor(page.rows[0].created_at, page.rows[0].id)
                if page.rows and not request.GET.get("cursor")
                else ""
            ),
        )
    return render_page(request, LIST_TEMPLATE, context, status=status)


@require_GET
@_console_view(VIEW_PERM)
def receipt_new_count(request: HtmxHttpRequest) -> HttpResponse:
    """How many rows matching the filter arrived above the first row shown (capped).

    The table is never reshuffled under the operator; the banner offers to reload instead.
    """
    receipt_filter, error = _parse_filter(request)
    count = 0
    since = request.GET.get("since", "")
    if receipt_filter is not None and since:
        created_at, row_id = decode_cursor(since) or (0, 0)
        newer = filter_receipts(receipt_filter).filter(
            Q(created_at__gt=created_at) | Q(created_at=created_at, id__gt=row_id)
        )
        count = capped_count(newer, NEW_ROWS_CAP)
    params = request.GET.copy()
    for key in ("since", "cursor"):
        params.pop(key, None)
    return render(
        request,
        "console/_new_banner.html",
        {
            "new_count": count,
            "cap": NEW_ROWS_CAP,
            "reload_query": params.urlencode(),
            "since": since,
            "error": error,
        },
    )


def _detail_context(request: HtmxHttpRequest, receipt: MemoryDurableReceipt) -> dict:
    events = cs.receipt_timeline(receipt.receipt_id)
    return {
        "receipt": receipt,
        "events": events,
        "version": cs.receipt_version(receipt, cs.newest_event_pk(events)),
        "related": cs.related_receipts(receipt),
        "preview": cs.receipt_preview(receipt),
        "checkpoint": cs.checkpoint_panel(receipt),
        "flush_outcome": flush_outcome_for_row(receipt),
        "actions": available_actions(receipt),
        "can_operate": can_operate(request.user),
        "upstream_marks": shown_to(
            request.user, cs.upstream_marks_for_receipt(receipt), marks_for_viewer
        ),
    }


def _receipt_or_404(
    request: HtmxHttpRequest, receipt_id: str
) -> MemoryDurableReceipt | HttpResponse:
    try:
        return get_receipt(receipt_id)
    except KeyError:
        return render_error(
            request,
            "No receipt has that id. It may have been removed with its session.",
            status=404,
            title="Receipt not found",
        )


@require_GET
@_console_view(VIEW_PERM)
def receipt_detail(request: HtmxHttpRequest, receipt_id: str) -> HttpResponse:
    receipt = _receipt_or_404(request, receipt_id)
    if isinstance(receipt, HttpResponse):
        return receipt
    seen = request.GET.get("v")
    if request.htmx and seen and seen == cs.receipt_version(receipt):
        # The poller's cheap question "has anything moved?": no, so nothing to swap.
        return HttpResponse(status=204)
    return render_page(request, DETAIL_TEMPLATE, _detail_context(request, receipt))


def _expected(request: HtmxHttpRequest) -> tuple[str | None, int | None]:
    """The status and stamp the operator saw: the compare-and-set guard of every action."""
    status = request.POST.get("expected_status") or None
    stamp = request.POST.get("expected_updated_at") or None
    if stamp is None:
        return status, None
    try:
        return status, int(stamp)
    except ValueError:
        raise ValidationFailed("expected_updated_at must be a whole number") from None


def _after_action(
    request: HtmxHttpRequest, receipt_id: str, message: str, ok: bool, *, status: int = 200
) -> HttpResponse:
    """Re-render what the action came from (a table row or the detail), or redirect."""
    if not request.htmx:
        (messages.success if ok else messages.warning)(request, message)
        return redirect(reverse("receipts:detail", args=[receipt_id]))
    receipt = get_receipt(receipt_id)
    context: dict = {"flash": message, "flash_ok": ok}
    if request.POST.get("fragment") == ROW_FRAGMENT:
        context.update(
            row=present_rows([receipt], show_gateway=spans_gateways(request, [receipt]))[0],
            can_operate=True,
            requeueable=requeueable_receipt_ids([receipt]),
            failure_statuses=FAILURE_STATUSES,
        )
        response = render_fragment(request, LIST_TEMPLATE, ROW_FRAGMENT, context, status=status)
    else:
        context.update(_detail_context(request, receipt))
        response = render_fragment(
            request, DETAIL_TEMPLATE, DETAIL_FRAGMENT, context, status=status
        )
    return trigger_client_event(response, CHANGED_EVENT, {"receipt_id": receipt_id})


@require_POST
@_console_view(VIEW_PERM, OPERATE_PERM)
def receipt_requeue(request: HtmxHttpRequest, receipt_id: str) -> HttpResponse:
    found = _receipt_or_404(request, receipt_id)
    if isinstance(found, HttpResponse):
        return found
    expected_status, expected_updated_at = _expected(request)
    result = requeue_receipt(
        receipt_id=receipt_id,
        actor=console_actor(request),
        reason=operator_note(request),
        expected_status=expected_status,
        expected_updated_at=expected_updated_at,
    )
    ok = str(result.outcome) in ("requeued", "superseded") and not result.warning
    text = outcome_text(result.outcome, result.message)
    if result.warning:
        text = f"{text}. Note: {result.warning}."
    return _after_action(request, receipt_id, text, ok)


@require_POST
@_console_view(VIEW_PERM, OPERATE_PERM)
def receipt_acknowledge(request: HtmxHttpRequest, receipt_id: str) -> HttpResponse:
    found = _receipt_or_404(request, receipt_id)
    if isinstance(found, HttpResponse):
        return found
    expected_status, expected_updated_at = _expected(request)
    try:
        result = acknowledge_receipt(
            receipt_id=receipt_id,
            actor=console_actor(request),
            reason=operator_note(request),
            expected_status=expected_status,
            expected_updated_at=expected_updated_at,
        )
    except ValueError as exc:
        return _after_action(request, receipt_id, str(exc), False, status=400)
    ok = result.outcome is AckOutcome.ACKNOWLEDGED
    return _after_action(request, receipt_id, outcome_text(result.outcome, result.message), ok)


# --- restore: the checkpoint read back -----------------------------------------------------

RESTORE_TEMPLATE = "console/checkpoint_restore.html"
_FILE_PROBLEMS = (CheckpointMissing, CheckpointUnreadable, CheckpointElsewhere)


@require_GET
@_console_view(VIEW_PERM)
def receipt_checkpoint(request: HtmxHttpRequest, receipt_id: str) -> HttpResponse:
    """The checkpoint as the conversation it saved, compared with the live transcript."""
    receipt = _receipt_or_404(request, receipt_id)
    if isinstance(receipt, HttpResponse):
        return receipt
    offset = int_param(request, "offset", 0, lo=0, hi=10**9)
    limit = int_param(request, "limit", PAGE_SIZE, lo=1, hi=PAGE_SIZE_MAX)
    context: dict = {"receipt": receipt, "view": None, "problem": None, "loss": None}
    try:
        view = restore_checkpoint(receipt, offset=offset, limit=limit)
    except NotACheckpoint as exc:
        return render_error(request, exc.message, status=422, title="Not a checkpoint")
    except _FILE_PROBLEMS as exc:
        context.update(problem=exc.message, problem_code=exc.code, loss=exc.loss)
    else:
        context.update(view=view, loss=view.loss)
    return render_page(request, RESTORE_TEMPLATE, context)


def _download(request: HtmxHttpRequest, receipt_id: str, stream, content_type: str) -> HttpResponse:
    receipt = _receipt_or_404(request, receipt_id)
    if isinstance(receipt, HttpResponse):
        return receipt
    try:
        name, chunks = stream(receipt)
    except NotACheckpoint as exc:
        return render_error(request, exc.message, status=422, title="Not a checkpoint")
    except _FILE_PROBLEMS as exc:
        return render_error(request, exc.message, status=409, title="The file cannot be sent")
    response = StreamingHttpResponse(chunks, content_type=content_type)
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in name) or "checkpoint"
    response["Content-Disposition"] = f'attachment; filename="{safe}"'
    # console_view types its views as HttpResponse; Django serves a streaming one the same way.
    return cast(HttpResponse, response)


@require_GET
@_console_view(VIEW_PERM)
def receipt_checkpoint_jsonl(request: HtmxHttpRequest, receipt_id: str) -> HttpResponse:
    """The checkpoint file exactly as stored, streamed."""
    return _download(request, receipt_id, checkpoint_jsonl_stream, "application/x-ndjson")


@require_GET
@_console_view(VIEW_PERM)
def receipt_checkpoint_markdown(request: HtmxHttpRequest, receipt_id: str) -> HttpResponse:
    """The conversation rendered as Markdown, streamed."""
    return _download(
        request, receipt_id, checkpoint_markdown_stream, "text/markdown; charset=utf-8"
    )
