"""A bulk requeue acts on exactly the rows the operator was shown (issue 10, item 1).

Each test reads the count the page shows and posts the form the page offers, as the
browser would, then compares the plan's dry run with that count.
"""

from __future__ import annotations

import itertools
import re

import pytest
from django.urls import reverse

from receipts_app.models import RequeuePlan
from tests.factories import make_receipt

from .html_forms import form_by_id, forms_posting_to

pytestmark = pytest.mark.django_db
_n = itertools.count(1)


def _failed(agent: str, reason: str, **fields):
    return make_receipt(
        session_key=f"agent:{agent}:webchat:s{next(_n)}",
        agent_id=agent,
        scope="repair",
        status="repair_abandoned",
        reason=reason,
        attempt_count=4,
        **fields,
    )


def _shown_total(html: str) -> int:
    return int(re.search(r'id="total-matching" data-total="(\d+)"', html).group(1))


def _seed_timeouts() -> None:
    for _ in range(3):
        _failed("page", "timeout #1 while distilling")
    for _ in range(2):
        _failed("page", "disk full")  # same agent, other reason
    for _ in range(2):
        _failed("other", "timeout #1 while distilling")  # same reason, other agent


@pytest.mark.parametrize(
    "query",
    [
        "?agent=page&reason=timeout%20%231",
        "?agent=page&reason=timeout%20%231&status=repair_abandoned",
        "?reason=timeout%20%231&scope=repair",
        "?agent=page",
    ],
)
def test_all_matching_plan_holds_exactly_the_rows_the_list_counts(operator_client, query):
    _seed_timeouts()
    page = operator_client.get(reverse("receipts:list") + query).content.decode()
    shown = _shown_total(page)
    form = form_by_id(page, "bulk-form")
    # What the browser sends after "Select all N matching", with a note typed beside it.
    payload = form.data(all_matching="1", note="provider is back")
    response = operator_client.post(form.attrs["action"], payload)
    assert response.status_code == 302
    plan = RequeuePlan.objects.get()
    assert plan.total == shown
    assert plan.reason == "provider is back"


def test_the_note_does_not_replace_the_reason_filter(operator_client):
    _seed_timeouts()
    page = operator_client.get(reverse("receipts:list") + "?agent=page&reason=timeout").content
    form = form_by_id(page.decode(), "bulk-form")
    operator_client.post(form.attrs["action"], form.data(all_matching="1", note="retry"))
    plan = RequeuePlan.objects.get()
    assert plan.filters.get("reason") == "timeout" and plan.total == 3


def test_the_bulk_button_can_say_the_count(operator_client):
    _seed_timeouts()
    page = operator_client.get(reverse("receipts:list") + "?agent=page").content.decode()
    assert 'data-label-all="Requeue 5 receipts… (dry run first)"' in page


def _group_form(overview: str, agent: str, fingerprint: str):
    groups = forms_posting_to(overview, reverse("receipts:plan_from_group"))
    return next(
        f for f in groups if {("agent", agent), ("fingerprint", fingerprint)} <= set(f.fields)
    )


def _overview_after_fold(client) -> str:
    from receipts_app.failure_groups import fold_all

    fold_all()  # what the beat task does within seconds
    return client.get(reverse("receipts:overview")).content.decode()


def test_a_failure_group_plan_is_exactly_the_group(operator_client):
    """The plan holds what the group counts: not a look-alike group's rows that the reason
    text's longest piece would also match, and not another agent's rows with the same error."""
    for agent in ("alpha", "alpha", "alpha", "beta"):
        _failed(agent, "provider_failed_archived after 3 tries")
    _failed("alpha", "provider_failed_archived after 3 tries (quota)")  # look-alike group
    overview = _overview_after_fold(operator_client)
    group = _group_form(overview, "alpha", "provider_failed_archived after <n> tries")
    assert "Requeue 3 receipts…" in overview
    assert "Requeue 1 receipt…" in overview  # beta's group of the same error, on its own row
    response = operator_client.post(group.attrs["action"], group.data(note="quota raised"))
    assert response.status_code == 302
    plan = RequeuePlan.objects.get()
    assert plan.total == 3
    assert plan.reason == "quota raised"
    assert {s["session_key"].split(":")[1] for s in plan.dry_run_samples["requeued"]} == {"alpha"}


def test_a_groups_view_lists_exactly_the_rows_it_counts(operator_client):
    """A look-alike reason shares the text a prefix filter would use (issue 22: a group
    counted 10 while its View listed 20); the View selects by fingerprint."""
    for _ in range(2):
        _failed("alpha", "timeout while distilling 7 entries")
    for _ in range(3):
        _failed("alpha", "timeout while distilling entries: /var/x/y.md unreadable")
    overview = _overview_after_fold(operator_client)
    links = re.findall(r'<a href="(/receipts/\?[^"]*fingerprint=[^"]*)">View</a>', overview)
    assert len(links) == 2
    listed = sorted(
        _shown_total(operator_client.get(link.replace("&amp;", "&")).content.decode())
        for link in links
    )
    assert listed == [2, 3]


def test_a_plan_of_a_group_that_grew_holds_what_was_shown(operator_client):
    for _ in range(3):
        _failed("alpha", "disk full")
    overview = _overview_after_fold(operator_client)
    group = _group_form(overview, "alpha", "disk full")
    assert "Requeue 3 receipts…" in overview
    for _ in range(2):  # failures still arriving while the operator reads the page
        _failed("alpha", "disk full")
    from receipts_app.failure_groups import fold_all

    fold_all()
    response = operator_client.post(group.attrs["action"], group.data(), follow=True)
    plan = RequeuePlan.objects.get()
    assert plan.total == 3
    assert "2 receipts joined this group after the overview was shown" in (
        response.content.decode()
    )


def test_a_group_that_no_longer_exists_is_a_message(operator_client):
    response = operator_client.post(
        reverse("receipts:plan_from_group"),
        {
            "agent": "x",
            "scope": "repair",
            "status": "repair_failed",
            "fingerprint": "y",
            "upto": "1",
        },
    )
    assert response.status_code == 409
    assert "no failed receipts any more" in response.content.decode()
    assert not RequeuePlan.objects.exists()


def test_a_failure_group_plan_stays_in_its_gateway(operator_client):
    """One agent's error on two gateways is two groups; the edge group's plan holds the edge
    rows only and freezes the gateway with its filter."""
    from sessions_app.gateways import ensure_gateway, using_gateway

    ensure_gateway("edge")
    for _ in range(2):
        _failed("alpha", "provider_failed_archived after 3 tries")
    with using_gateway("edge"):
        edge_ids = {_failed("alpha", "provider_failed_archived after 3 tries").receipt_id}
    overview = _overview_after_fold(operator_client)
    forms = [
        f
        for f in forms_posting_to(overview, reverse("receipts:plan_from_group"))
        if ("group_gateway", "edge") in set(f.fields)
    ]
    assert len(forms) == 1 and "Requeue 2 receipts…" in overview
    response = operator_client.post(forms[0].attrs["action"], forms[0].data(note="edge only"))
    assert response.status_code == 302
    plan = RequeuePlan.objects.get()
    assert plan.total == 1 and set(plan.receipt_ids) == edge_ids
    assert plan.filters["gateway"] == "edge"
