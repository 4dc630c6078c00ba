"""Requeue plans: create from a selection or a whole filter, review the dry run, confirm,
and watch the execution's progress."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import trigger_client_event

from sessions_app.gateways import DEFAULT_GATEWAY

from ...models import RequeuePlan
from ...requeue import (
    create_requeue_plan,
    get_requeue_plan,
    plan_follow_up,
    plan_warnings,
    start_requeue_plan,
)
from ...selectors import ReceiptFilter
from .. import selectors as cs
from ..helpers import (
    CHANGED_EVENT,
    OPERATE_PERM,
    VIEW_PLANS_PERM,
    HtmxHttpRequest,
    can_operate,
    console_actor,
    console_view,
    int_param,
    operator_note,
    render_error,
    render_fragment,
    render_page,
)

RUNNING_STATES = ("queued", "running")
DETAIL_TEMPLATE = "console/plan_detail.html"
PROGRESS_FRAGMENT = "plan-progress"
# The operator's note on a plan. Not "reason": that is the list filter's reason text, and
# the plan form carries the whole filter beside it.
NOTE_FIELD = "note"


@require_POST
@console_view(VIEW_PLANS_PERM, OPERATE_PERM)
def plan_create(request: HtmxHttpRequest) -> HttpResponse:
    """Freeze either the checked rows or, with ``all_matching``, the whole filter.

    The filter arrives as the same query parameters the list uses, so the plan selects
    exactly what the operator was looking at.
    """
    selected = [rid for rid in request.POST.getlist("selected") if rid.strip()][:1000]
    all_matching = request.POST.get("all_matching") in ("1", "true", "on")
    if not all_matching and not selected:
        return render_error(
            request, "Select at least one receipt, or select all matching.", status=400
        )
    params = request.POST.copy()
    for key in ("selected", "all_matching", "csrfmiddlewaretoken", NOTE_FIELD):
        params.pop(key, None)
    receipt_filter = ReceiptFilter.from_params(params)
    # Checked rows keep the gateway of the list they were checked in (frozen with the plan).
    picked = {"gateway": receipt_filter.gateway} if receipt_filter.gateway else {}
    plan = create_requeue_plan(
        filters=receipt_filter.to_params() if all_matching else picked,
        receipt_ids=None if all_matching else selected,
        actor=console_actor(request),
        reason=operator_note(request, NOTE_FIELD),
    )
    return redirect(reverse("receipts:plan_detail", args=[plan.plan_id]))


@require_POST
@console_view(VIEW_PLANS_PERM, OPERATE_PERM)
def plan_from_group(request: HtmxHttpRequest) -> HttpResponse:
    """A plan of exactly one overview failure group as the page showed it: its gateway, agent,
    scope, status and error fingerprint select its members (not the reason text's longest piece,
    which also matches look-alike groups), up to the page's mark, so receipts that joined
    the group after the page rendered are left out and counted in a message."""
    post = request.POST
    scope, status = post.get("scope", ""), post.get("status", "")
    upto = int_field(post.get("upto"))
    gateway = post.get("group_gateway") or DEFAULT_GATEWAY
    selection = cs.failure_group_receipt_ids(
        gateway_id=gateway,
        agent_id=post.get("agent", ""),
        scope=scope,
        status=status,
        fingerprint=post.get("fingerprint", ""),
        upto=upto,
    )
    ids = selection.receipt_ids
    if not ids:
        return render_error(
            request,
            "That failure group has no failed receipts any more; the overview shows what is left.",
            status=409,
            title="Nothing to requeue",
        )
    if len(ids) > cs.GROUP_PLAN_LIMIT:
        return render_error(
            request,
            f"That group has more than {cs.GROUP_PLAN_LIMIT:,} receipts: plan it from the "
            "receipts list (View), whose filter a plan can freeze.",
            status=400,
        )
    plan = create_requeue_plan(
        filters={"status": status, "scope": scope, "gateway": gateway},
        receipt_ids=ids,
        actor=console_actor(request),
        reason=operator_note(request, NOTE_FIELD),
    )
    if selection.arrived_since:
        n = selection.arrived_since
        messages.info(
            request,
            f"{n:,} receipt{pluralize(n)} joined this group after the overview was shown; "
            "this plan holds only the receipts it showed.",
        )
    return redirect(reverse("receipts:plan_detail", args=[plan.plan_id]))


def int_field(value: str | None) -> int | None:
    """A whole number from a hidden form field, or None (then the whole group counts)."""
    try:
        return int(str(value).strip()) if value not in (None, "") else None
    except ValueError:
        return None


@require_GET
@console_view(VIEW_PLANS_PERM)
def plan_list(request: HtmxHttpRequest) -> HttpResponse:
    rows, marker = cs.page_plans(
        before=request.GET.get("before") or None,
        limit=int_param(request, "limit", 50, lo=10, hi=200),
    )
    return render(request, "console/plans.html", {"plans": rows, "next_marker": marker})


def _plan_or_404(request: HtmxHttpRequest, plan_id: str) -> RequeuePlan | HttpResponse:
    try:
        return get_requeue_plan(plan_id)
    except KeyError:
        return render_error(
            request, "No requeue plan has that id.", status=404, title="Plan not found"
        )


def _plan_context(request: HtmxHttpRequest, plan: RequeuePlan) -> dict:
    samples = plan.dry_run_samples or {}
    # Tallied once the plan has finished queueing its rows (one grouped query per poll); while
    # it runs, the progress bar is the news.
    follow_up = plan_follow_up(plan.plan_id) if plan.state == "done" else None
    return {
        "plan": plan,
        "outcomes": [
            (outcome, count, samples.get(outcome, []))
            for outcome, count in sorted((plan.dry_run_counts or {}).items(), key=lambda kv: -kv[1])
        ],
        "results": sorted((plan.result_counts or {}).items(), key=lambda kv: -kv[1]),
        "running": plan.state in RUNNING_STATES,
        "follow_up": follow_up,
        # Keep asking while the plan runs or the work it queued is still on the workers.
        "polling": plan.state in RUNNING_STATES
        or (follow_up is not None and not follow_up.settled),
        "percent": int(100 * plan.processed / plan.total) if plan.total else 100,
        "can_operate": can_operate(request.user),
        "filter_query": ReceiptFilter.from_params(plan.filters).to_params() if plan.filters else {},
        # Gateways whose rows it queues work for and whose queue no live worker consumes.
        "plan_warnings": plan_warnings(plan)
        if plan.state in ("previewed", "failed", *RUNNING_STATES)
        else [],
    }


@require_GET
@console_view(VIEW_PLANS_PERM)
def plan_detail(request: HtmxHttpRequest, plan_id: str) -> HttpResponse:
    plan = _plan_or_404(request, plan_id)
    if isinstance(plan, HttpResponse):
        return plan
    return render_page(request, DETAIL_TEMPLATE, _plan_context(request, plan))


@require_GET
@console_view(VIEW_PLANS_PERM)
def plan_progress(request: HtmxHttpRequest, plan_id: str) -> HttpResponse:
    """The progress fragment; it asks again while the plan or the work it queued runs."""
    plan = _plan_or_404(request, plan_id)
    if isinstance(plan, HttpResponse):
        return plan
    context = _plan_context(request, plan)
    response = render_fragment(request, DETAIL_TEMPLATE, PROGRESS_FRAGMENT, context)
    if plan.state not in RUNNING_STATES:
        trigger_client_event(response, CHANGED_EVENT, {"plan_id": plan.plan_id})
    return response


@require_POST
@console_view(VIEW_PLANS_PERM, OPERATE_PERM)
def plan_execute(request: HtmxHttpRequest, plan_id: str) -> HttpResponse:
    found = _plan_or_404(request, plan_id)
    if isinstance(found, HttpResponse):
        return found
    plan = start_requeue_plan(plan_id=plan_id, actor=console_actor(request))
    if not request.htmx:
        return redirect(reverse("receipts:plan_detail", args=[plan.plan_id]))
    plan.refresh_from_db()  # an eager/fast worker may already have moved it on
    response = render_fragment(
        request, DETAIL_TEMPLATE, PROGRESS_FRAGMENT, _plan_context(request, plan)
    )
    return trigger_client_event(response, CHANGED_EVENT, {"plan_id": plan.plan_id})
