"""Console URLs. Two namespaces: ``receipts`` (the ledger pages) and ``sessions``."""

from django.urls import include, path

import opensquilla_site.schemas  # noqa: F401 - registers the "anytext" path converter

from .views import (
    audit,
    fleet,
    gateway_repairs,
    overview,
    plans,
    receipts,
    scrub,
    session_memory,
    sessions,
)

receipt_patterns = (
    [
        path("", overview.overview, name="overview"),
        path("fleet/", fleet.fleet, name="fleet"),
        path(
            "gateways/<str:name>/repairs/",
            gateway_repairs.gateway_repairs,
            name="gateway_repairs",
        ),
        path("scrub/", scrub.scrub_now, name="scrub"),
        path("checkpoints/verified/", scrub.checkpoints_verified, name="checkpoints_verified"),
        path("receipts/", receipts.receipt_list, name="list"),
        path("receipts/new-count/", receipts.receipt_new_count, name="new_count"),
        # Receipt ids are free text (imports, the API): the converter accepts any stored one.
        # The action routes come first so an id never swallows their suffix.
        path("receipts/<anytext:receipt_id>/requeue/", receipts.receipt_requeue, name="requeue"),
        path(
            "receipts/<anytext:receipt_id>/acknowledge/",
            receipts.receipt_acknowledge,
            name="acknowledge",
        ),
        path(
            "receipts/<anytext:receipt_id>/checkpoint/",
            receipts.receipt_checkpoint,
            name="checkpoint",
        ),
        path(
            "receipts/<anytext:receipt_id>/checkpoint.jsonl",
            receipts.receipt_checkpoint_jsonl,
            name="checkpoint_jsonl",
        ),
        path(
            "receipts/<anytext:receipt_id>/checkpoint.md",
            receipts.receipt_checkpoint_markdown,
            name="checkpoint_markdown",
        ),
        path("receipts/<anytext:receipt_id>/", receipts.receipt_detail, name="detail"),
        path("plans/", plans.plan_list, name="plans"),
        path("plans/new/", plans.plan_create, name="plan_create"),
        path("plans/new/group/", plans.plan_from_group, name="plan_from_group"),
        path("plans/<str:plan_id>/", plans.plan_detail, name="plan_detail"),
        path("plans/<str:plan_id>/progress/", plans.plan_progress, name="plan_progress"),
        path("plans/<str:plan_id>/execute/", plans.plan_execute, name="plan_execute"),
        path("audit/", audit.audit_log, name="audit"),
        path("session-memory/", session_memory.session_memory, name="session_memory"),
        path(
            "session-memory/checkpoint/",
            session_memory.session_checkpoint_now,
            name="session_checkpoint",
        ),
        path("session-memory/flush/", session_memory.session_flush_now, name="session_flush"),
    ],
    "receipts",
)

session_patterns = (
    [
        path("", sessions.session_list, name="list"),
        # Keys are free text (colons, slashes): the path converter keeps them whole.
        path("s/<anytext:session_key>", sessions.session_detail, name="detail"),
    ],
    "sessions",
)

urlpatterns = [
    path("sessions/", include(session_patterns)),
    path("", include(receipt_patterns)),
]
