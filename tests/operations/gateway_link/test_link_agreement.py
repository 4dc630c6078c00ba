"""The link panel's two facts: the link's reachability and the two sides' verdicts, "in step"
only when both sides were read and agree (the walk's "in step" beside an unreachable gateway
and beside a gateway reporting a repair failure)."""

from __future__ import annotations

import pytest

from operations_app.gateway_link.views import AgentLinkView, GapView
from operations_app.models import GatewayLink, GatewayMemoryVerdict
from receipts_app.verdict import State

NOW = 1_000_000


def _row(*, link_state="ok", answered=True, safety="ok", backlog=0, failures=(), here=0, gap=0):
    link = GatewayLink(gateway_id="c", state=link_state, checked_at=NOW)
    verdict = GatewayMemoryVerdict(
        gateway_id="c",
        agent_id="main",
        read_at=NOW,
        answered_at=NOW if answered else None,
        state=link_state,
        memory_safety=safety if answered else "",
        repair_backlog_count=backlog if answered else None,
        repair_failures=list(failures),
    )
    return AgentLinkView(
        gateway="c",
        agent_id="main",
        link=link,
        verdict=verdict,
        at_risk_here=here,
        backlog_here=0,
        at_risk_filter={},
        gap=GapView(total=gap),
        now=NOW,
        # What health.verdicts says of these counts (the page reads it there).
        here_state=State.AT_RISK if here else State.OK,
    )


def test_an_unreachable_gateway_is_not_compared_and_never_in_step():
    row = _row(link_state="unreachable", answered=False, here=1)
    assert row.reachability == "unreachable"
    assert row.theirs.label == "not read"
    assert row.here.label == "at risk"
    assert (row.agreement, row.agreement_label) == ("not_compared", "not compared")
    assert "in step" not in row.here_says


def test_a_kept_old_answer_is_not_compared_either():
    row = _row(link_state="timeout", answered=True, safety="ok")
    assert row.theirs.label == "ok"  # the last answer, shown with its age
    assert row.agreement == "not_compared"


def test_a_gateway_reporting_a_repair_failure_differs_from_nothing_at_risk_here():
    row = _row(safety="error", failures=[{"summaryId": 4}], here=0)
    assert row.reachability == "reachable"
    assert (row.theirs.label, row.here.label) == ("at risk", "ok")
    assert row.agreement == "differ"


@pytest.mark.parametrize(
    ("fields", "agreement"),
    [
        ({"safety": "ok", "here": 0}, "in_step"),
        ({"safety": "error", "here": 2}, "in_step"),
        ({"safety": "error", "here": 2, "gap": 1}, "differ"),
        ({"safety": "ok", "backlog": 3, "here": 0}, "differ"),
        ({"link_state": "refused", "answered": False}, "not_compared"),
    ],
)
def test_in_step_only_when_both_sides_were_read_and_agree(fields, agreement):
    assert _row(**fields).agreement == agreement
