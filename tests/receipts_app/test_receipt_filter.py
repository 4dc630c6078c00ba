"""One filter definition: dates, errors, CLI flags, the API schema and stored plans agree."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from opensquilla_site.exceptions import ValidationFailed
from receipts_app.audit import Actor
from receipts_app.requeue import create_requeue_plan
from receipts_app.selectors import RECEIPT_FILTER_FIELDS, ReceiptFilter
from tests.api.conftest import (
    assert_error,
    reader,  # noqa: F401 - fixture: an API caller with a read token
)
from tests.console.conftest import viewer_client  # noqa: F401 - fixture: a console viewer
from tests.factories import make_receipt

JAN_31_2025_MS = 1_738_281_600_000  # 2025-01-31T00:00:00Z
ALICE = Actor("alice", "cli")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("2025-01-31", JAN_31_2025_MS),  # a date is its first instant, in UTC
        ("2025-01-31T12:00", JAN_31_2025_MS + 12 * 3_600_000),  # naive means UTC
        ("2025-01-31T12:00Z", JAN_31_2025_MS + 12 * 3_600_000),
        ("2025-01-31T13:00+01:00", JAN_31_2025_MS + 12 * 3_600_000),
        (str(JAN_31_2025_MS), JAN_31_2025_MS),
        ("1970-01-01T00:00:00.0019", 1),  # whole milliseconds, never rounded up
    ],
)
def test_dates_parse_to_the_same_epoch_ms_everywhere(text, expected):
    parsed = ReceiptFilter.from_params({"created_from": text, "updated_to": text})
    assert (parsed.created_from, parsed.updated_to) == (expected, expected)
    # What a plan or a URL stores parses back to the same filter.
    assert ReceiptFilter.from_params(parsed.to_params()) == parsed


@pytest.mark.parametrize("text", ["last week", "2025-13-01", "31/01/2025", "1969-12-31"])
def test_a_bad_date_is_refused_by_name(text):
    with pytest.raises(ValidationFailed) as excinfo:
        ReceiptFilter.from_params({"status": "checkpoint_failed", "created_to": text})
    assert "created_to" in excinfo.value.message
    assert excinfo.value.extra["fields"].keys() == {"created_to"}


@pytest.mark.django_db
def test_an_iso_date_selects_the_same_rows_in_api_cli_and_console(reader, viewer_client):  # noqa: F811
    old = make_receipt(status="checkpoint_failed", created_at=JAN_31_2025_MS - 1)
    new = make_receipt(status="checkpoint_failed", created_at=JAN_31_2025_MS)

    api = reader.get("/receipts", {"created_from": "2025-01-31"})
    assert {r["receipt_id"] for r in api.json()["items"]} == {new.receipt_id}

    out = StringIO()
    call_command("export_receipts", "--created-from", "2025-01-31", stdout=out)
    assert [json.loads(line)["receipt_id"] for line in out.getvalue().splitlines()] == [
        new.receipt_id
    ]

    body = viewer_client.get(reverse("receipts:list") + "?created_from=2025-01-31").content
    assert new.receipt_id.encode() in body and old.receipt_id.encode() not in body


@pytest.mark.django_db
def test_a_bad_date_is_an_error_on_every_surface(reader, viewer_client):  # noqa: F811
    make_receipt(status="checkpoint_failed")
    response = reader.get("/receipts", {"created_from": "2025-02-30"})
    assert_error(response, 422, "validation_error")
    assert "created_from" in response.json()["detail"]

    with pytest.raises(CommandError, match="created_from must be epoch milliseconds"):
        call_command("export_receipts", "--created-from", "2025-02-30", stdout=StringIO())

    page = viewer_client.get(reverse("receipts:list") + "?created_from=2025-02-30")
    assert page.status_code == 400
    assert "created_from must be epoch milliseconds" in page.content.decode()


def test_cli_flags_and_api_parameters_come_from_the_one_list():
    from opensquilla_site.api import api

    expected = {f.param for f in RECEIPT_FILTER_FIELDS}
    assert set(ReceiptFilter.PARAMS) == expected
    operation = api.get_openapi_schema()["paths"]["/api/v1/receipts"]["get"]
    api_params = {p["name"] for p in operation["parameters"]} - {"cursor", "limit"}
    assert api_params == expected

    from receipts_app.management.commands.export_receipts import Command

    parser = Command().create_parser("manage.py", "export_receipts")
    flags = {opt for action in parser._actions for opt in action.option_strings}
    assert {f.flag for f in RECEIPT_FILTER_FIELDS} <= flags


@pytest.mark.django_db
def test_a_plan_stores_the_filter_as_query_parameters():
    make_receipt(status="repair_failed", reason="OSError")
    plan = create_requeue_plan(
        filters={"status": "repair_failed", "reason": "oserror", "created_from": "2000-01-01"},
        receipt_ids=None,
        actor=ALICE,
    )
    assert plan.filters == {
        "status": ["repair_failed"],
        "reason": "oserror",
        "created_from": 946_684_800_000,
    }
    assert plan.total == 1
    # The filter's attribute names are not parameters: refused, never silently dropped.
    with pytest.raises(ValidationFailed, match="unknown filter keys: reason_contains"):
        create_requeue_plan(
            filters={"status": "repair_failed", "reason_contains": "x"},
            receipt_ids=None,
            actor=ALICE,
        )


@pytest.mark.django_db
def test_plans_stored_under_the_old_attribute_names_are_rewritten():
    from importlib import import_module

    from django.apps import apps

    from receipts_app.models import RequeuePlan

    legacy = RequeuePlan.objects.create(
        created_by="alice",
        surface="cli",
        filters={"statuses": ["repair_failed"], "reason_contains": "oserror", "agent": "ops"},
    )
    current = RequeuePlan.objects.create(created_by="alice", surface="cli", filters={"due": "true"})
    migration = import_module("receipts_app.migrations.0006_plan_filters_as_params")
    migration.forwards(apps, None)
    legacy.refresh_from_db()
    current.refresh_from_db()
    assert legacy.filters == {"status": ["repair_failed"], "reason": "oserror", "agent": "ops"}
    assert current.filters == {"due": "true"}
