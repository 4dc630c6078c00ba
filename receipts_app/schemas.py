"""In/Out schemas of the receipts, requeue-plan and health API."""

from __future__ import annotations

from typing import Annotated, Any

from ninja import FilterSchema, ModelSchema, Schema
from pydantic import (
    AfterValidator,
    Field,
    ModelWrapValidatorHandler,
    ValidationInfo,
    create_model,
    model_validator,
)

from opensquilla_site.identifiers import IDEMPOTENCY_KEY_MAX
from opensquilla_site.pagination import MAX_PAGE_SIZE
from opensquilla_site.schemas import (
    EpochMs,
    IdText,
    Int32,
    KeyText,
    SessionKeyText,
    ShortText,
    Text,
    clean_identifier,
    clean_json,
    clean_text,
)

from .ledger import LEDGER_FIELDS
from .mirror.schemas import MirrorStateOut
from .models import MemoryDurableReceipt, ReceiptEvent, RequeuePlan
from .receipt_ids import check_receipt_id
from .requeue import plan_warnings
from .selectors import RECEIPT_FILTER_FIELDS, ReceiptFilter

MAX_BULK_ROWS = 1000

# Every ledger column (docs/UPSTREAM.md#columns) plus our derived agent and requeue link, listed by name.
RECEIPT_FIELDS = [*LEDGER_FIELDS, "agent_id", "resolved_by_receipt_id"]

NOT_NULL_COLUMNS = (
    "session_key",
    "session_id",
    "scope",
    "idempotency_key",
    "status",
    "attempt_count",
    "updated_at",
    "schema_version",
)
FilterText = Annotated[str, Field(max_length=4000), AfterValidator(clean_text)]


def gateway_name(obj: Any) -> str:
    """The row's gateway name, read from its column (``gateway_id``: no query per row)."""
    if isinstance(obj, dict):
        return str(obj.get("gateway") or obj.get("gateway_id") or "local")
    # A model row has the column; a schema already built from one has the field.
    return str(getattr(obj, "gateway_id", None) or obj.gateway)


class ReceiptOut(ModelSchema):
    gateway: str  # the gateway the receipt belongs to (sessions_app.gateways)

    class Meta:
        model = MemoryDurableReceipt
        fields = RECEIPT_FIELDS

    @staticmethod
    def resolve_gateway(obj: Any) -> str:
        return gateway_name(obj)


class ReceiptPageOut(Schema):
    items: list[ReceiptOut]
    next_cursor: str | None


# The API's filter parameters, generated from the one list the CLI flags come from too.
_FILTER_TYPES: dict[str, Any] = {
    "many": list[FilterText] | None,
    "text": FilterText | None,
    "time": FilterText | None,  # epoch ms or ISO 8601: ReceiptFilter.from_params parses it
    "count": EpochMs | None,
    "flag": bool | None,
}
_FILTER_FIELDS: dict[str, Any] = {
    f.param: (_FILTER_TYPES[f.kind], Field(None, description=f.help)) for f in RECEIPT_FILTER_FIELDS
}
_ReceiptFilterFields: Any = create_model(
    "_ReceiptFilterFields", __base__=FilterSchema, **_FILTER_FIELDS
)


class ReceiptFilterSchema(_ReceiptFilterFields):
    """Every ledger filter, for the OpenAPI docs. Parsing is ``ReceiptFilter.from_params``:
    the console, the CLI, requeue plans and this API share that one rule."""

    def to_receipt_filter(self) -> ReceiptFilter:
        return ReceiptFilter.from_params(self.model_dump(exclude_none=True))


class ReceiptListQuery(Schema):
    cursor: str | None = Field(None, max_length=200)
    limit: int = Field(50, ge=1, le=MAX_PAGE_SIZE)


class _ReceiptColumns(Schema):
    turn_id: Text | None = None
    source_path: Text | None = None
    target_path: Text | None = None
    content_hash: IdText | None = None
    coverage_turn_id: Text | None = None
    coverage_hash: IdText | None = None
    coverage_entry_count: Int32 | None = None
    reason: Text | None = None
    next_retry_at_ms: EpochMs | None = None

    model_config = {"extra": "forbid"}


class ReceiptIn(_ReceiptColumns):
    """One receipt to upsert by ``idempotency_key`` (docs/UPSTREAM.md#columns).

    On a conflict the stored row keeps its ``receipt_id`` and ``created_at``; the rest is
    overwritten and ``updated_at`` is stamped now.
    """

    receipt_id: Annotated[IdText, AfterValidator(check_receipt_id)] | None = Field(
        None, description="uuid4 by default; must not contain '/' (one URL path segment)"
    )
    session_key: SessionKeyText
    session_id: Annotated[
        str, Field(min_length=1, max_length=200), AfterValidator(clean_identifier)
    ]
    scope: Annotated[str, Field(min_length=1, max_length=64), AfterValidator(clean_identifier)]
    idempotency_key: KeyText
    status: Annotated[str, Field(min_length=1, max_length=64), AfterValidator(clean_identifier)]
    attempt_count: Int32 = 0
    created_at: EpochMs | None = None
    schema_version: Int32 = 1


class ReceiptUpsertIn(ReceiptIn):
    expected_session_id: (
        Annotated[str, Field(min_length=1, max_length=200), AfterValidator(clean_identifier)] | None
    ) = Field(None, description="fence: 409 when the session's live generation differs")


class ReceiptBulkItem(ReceiptIn):
    """One bulk row: exactly ``ReceiptIn``'s fields and rules.

    ninja's ``Schema`` wraps its input in a ``DjangoGetter`` (for ORM objects) and, with
    ``extra="forbid"``, validates it twice. A request body is plain JSON, so the bulk rows skip
    that wrapper: a third of the validation time for 1,000 rows.
    """

    @model_validator(mode="wrap")
    @classmethod
    def _run_root_validator(
        cls, values: Any, handler: ModelWrapValidatorHandler[Any], info: ValidationInfo
    ) -> Any:
        return handler(values)


class ReceiptBulkIn(Schema):
    receipts: list[ReceiptBulkItem] = Field(..., min_length=1, max_length=MAX_BULK_ROWS)

    model_config = {"extra": "forbid"}


class BulkResultOut(Schema):
    index: int = Field(description="position of the row in the request")
    receipt: ReceiptOut = Field(description="the stored row (original receipt_id, created_at)")


class BulkOut(Schema):
    count: int
    results: list[BulkResultOut]


# The keys of one ``ReceiptOut``, in its order: the bulk endpoint renders rows straight to JSON.
RECEIPT_OUT_KEYS: tuple[str, ...] = tuple(ReceiptOut.model_fields)
# Where each key is on a stored row (the gateway is its ``gateway_id``).
RECEIPT_OUT_ATTRS: dict[str, str] = {
    k: "gateway_id" if k == "gateway" else k for k in RECEIPT_OUT_KEYS
}


class ReceiptPatchIn(_ReceiptColumns):
    """Columns to change; only the ones sent are written. Unknown fields are a 422."""

    session_key: SessionKeyText | None = None
    session_id: (
        Annotated[str, Field(min_length=1, max_length=200), AfterValidator(clean_identifier)] | None
    ) = None
    scope: (
        Annotated[str, Field(min_length=1, max_length=64), AfterValidator(clean_identifier)] | None
    ) = None
    idempotency_key: KeyText | None = None
    status: (
        Annotated[str, Field(min_length=1, max_length=64), AfterValidator(clean_identifier)] | None
    ) = None
    attempt_count: Int32 | None = None
    updated_at: EpochMs | None = None
    schema_version: Int32 | None = None
    resolved_by_receipt_id: IdText | None = None

    @model_validator(mode="after")
    def _required_columns_not_null(self) -> ReceiptPatchIn:
        nulled = sorted(
            name
            for name in NOT_NULL_COLUMNS
            if name in self.model_fields_set and getattr(self, name) is None
        )
        if nulled:
            raise ValueError(f"these columns cannot be null: {', '.join(nulled)}")
        return self


class ReceiptEventOut(ModelSchema):
    details: dict[str, Any]
    gateway: str  # the gateway of the receipt or session the event is about

    @staticmethod
    def resolve_gateway(obj: Any) -> str:
        return gateway_name(obj)

    class Meta:
        model = ReceiptEvent
        fields = [
            "id",
            "receipt_id",
            "session_key",
            "created_at",
            "actor",
            "surface",
            "action",
            "from_status",
            "to_status",
            "outcome",
            "reason",
            "plan_id",
            "details",
        ]


class ReceiptEventPageOut(Schema):
    items: list[ReceiptEventOut]
    next_cursor: str | None


class RequeueIn(Schema):
    reason: Text = ""
    expected_status: ShortText | None = Field(None, description="compare-and-set: act only if")
    expected_updated_at: EpochMs | None = Field(None, description="compare-and-set: act only if")

    model_config = {"extra": "forbid"}


class RequeueOut(Schema):
    receipt_id: str
    outcome: str = Field(
        description="requeued | superseded | fenced | in_flight | not_requeueable | stale | not_found"
    )
    message: str
    status: str | None
    superseded_by: str | None = None
    task_id: str | None = None
    warning: str | None = Field(
        default=None,
        description="set when the work went to a gateway's queue that no live worker consumes: "
        "it is accepted and waits until one starts",
    )


class AcknowledgeIn(Schema):
    reason: Annotated[str, Field(min_length=1, max_length=10_000), AfterValidator(clean_text)]
    expected_status: ShortText | None = None
    expected_updated_at: EpochMs | None = None

    model_config = {"extra": "forbid"}


class AcknowledgeOut(Schema):
    receipt_id: str
    outcome: str = Field(description="acknowledged | not_acknowledgeable | stale | not_found")
    message: str
    status: str | None
    from_status: str | None = None


class RequeuePlanIn(Schema):
    filters: Annotated[dict[str, Any], AfterValidator(clean_json)] = Field(
        default_factory=dict, description="the GET /receipts filter parameters"
    )
    receipt_ids: list[IdText] = Field(default_factory=list, max_length=10_000)
    reason: Text = ""

    model_config = {"extra": "forbid"}


class RequeuePlanOut(ModelSchema):
    # JSON columns, typed for the docs (a ModelSchema would call them "any object").
    filters: dict[str, Any]
    receipt_ids: list[str]
    work_gateways: list[str] = Field(
        default_factory=list, description="gateways (not local) whose rows the plan queues work for"
    )
    dry_run_counts: dict[str, int] = Field(description="outcome -> rows")
    dry_run_samples: dict[str, list[dict[str, Any]]] = Field(description="outcome -> sample rows")
    result_counts: dict[str, int] = Field(description="outcome -> rows, while executing")
    warnings: list[str] = Field(
        default_factory=list,
        description="one per gateway whose rows the plan queues work for and whose queue no "
        "live worker consumes: the work is accepted and waits until one starts",
    )

    class Meta:
        model = RequeuePlan
        fields = [
            "plan_id",
            "created_by",
            "surface",
            "reason",
            "filters",
            "receipt_ids",
            "state",
            "total",
            "dry_run_counts",
            "dry_run_samples",
            "work_gateways",
            "processed",
            "result_counts",
            "error",
            "created_at",
            "updated_at",
            "started_at",
            "finished_at",
        ]

    @staticmethod
    def resolve_warnings(obj: Any) -> list[str]:
        return plan_warnings(obj) if isinstance(obj, RequeuePlan) else []


class TaskOut(Schema):
    task_id: str
    status: str = "queued"
    status_url: str = Field(description="where the resulting receipts appear")
    warning: str | None = Field(
        default=None,
        description="set when the session's gateway has no live worker on its queue",
    )


class CoverageOut(Schema):
    session_key: str
    session_id: str
    entry_count: int
    covered: bool
    receipt: ReceiptOut | None


class FlushOut(Schema):
    mode: str
    result_status: str
    flushed_paths: list[str]
    message_count: int
    raw_reason: str | None
    error: str | None
    receipts: list[ReceiptOut] = Field(description="ledger rows this flush wrote")


class ScrubIn(Schema):
    agent: Text | None = Field(default=None, description="only this agent's checkpoints")
    full: bool = Field(default=False, description="read every file in full, changed or not")

    model_config = {"extra": "forbid"}


class CheckpointIn(Schema):
    # It becomes part of the receipt's idempotency key: bounded and checked as one (the service
    # also holds the whole key to the bound, which depends on the session key's length).
    turn_id: (
        Annotated[str, Field(max_length=IDEMPOTENCY_KEY_MAX), AfterValidator(clean_identifier)]
        | None
    ) = None

    model_config = {"extra": "forbid"}


class MemorySafetyOut(Schema):
    status: str
    errorCount: int  # noqa: N815 - upstream's field names (docs/UPSTREAM.md#health)
    errorStatuses: dict[str, int]  # noqa: N815
    sampleReceiptIds: list[str]  # noqa: N815
    rowsChecked: int  # noqa: N815
    filter: dict[str, Any] = Field(
        description="receipt filter (list query parameters) selecting exactly the errorCount rows"
    )
    hashMismatchCount: int  # noqa: N815
    hashMismatchFilter: dict[str, Any] | None = Field(  # noqa: N815
        description="the rows whose status or reason names a hash mismatch, by receipt_id"
    )


class SemanticMemoryOut(Schema):
    status: str
    repairBacklogCount: int  # noqa: N815
    oldestRepairCreatedAt: int | None  # noqa: N815
    filter: dict[str, Any] = Field(description="the receipt filter listing the backlog")


class TerminalRepairsOut(Schema):
    count: int = Field(description="repair_failed and repair_abandoned rows")
    filter: dict[str, Any] = Field(description="the receipt filter listing them")


class AtRiskOut(Schema):
    count: int = Field(
        description="receipts at risk: the failure statuses and checkpoint_requeued, as the "
        "overview, the failure groups and /metrics count them"
    )
    filter: dict[str, Any] = Field(description="the receipt filter listing them")


class HealthOut(Schema):
    agentId: str | None  # noqa: N815
    # The gateway whose rows are counted; None: every gateway (an agent's health without
    # ``?gateway=``). The list gives one item per (gateway, agent).
    gateway: str | None = None
    memorySafety: MemorySafetyOut  # noqa: N815
    semanticMemory: SemanticMemoryOut  # noqa: N815
    terminalRepairs: TerminalRepairsOut  # noqa: N815
    atRisk: AtRiskOut  # noqa: N815


class HealthListOut(Schema):
    items: list[HealthOut]
    # The live OpenSquilla mirror, one entry per followed source (empty when none): docs/MIRROR.md.
    mirror: list[MirrorStateOut] = []


class AtRiskCountOut(Schema):
    count: int
    # ReceiptFilter params (GET /receipts) that list exactly the rows counted.
    filter: dict[str, Any]


class HashMismatchesOut(Schema):
    count: int
    # ReceiptFilter params listing exactly the rows counted, by receipt_id; None when none.
    filter: dict[str, Any] | None


class GatewayAtRiskOut(Schema):
    # Memory at risk: the product's one definition (statuses.AT_RISK_STATUSES).
    memory_at_risk: AtRiskCountOut
    memory_safety_errors: AtRiskCountOut
    repair_backlog: AtRiskCountOut
    terminal_repairs: AtRiskCountOut


class MirrorSummaryOut(Schema):
    # The worst state of the gateway's followed sources; None when nothing follows it.
    status: str | None
    healthy: bool | None
    # The largest lag of its sources (docs/MIRROR.md, "Lag"): 0 when caught up.
    lag_seconds: float | None
    lag_ms: int | None
    sources: int


class CheckpointsVerifiedOut(Schema):
    """How much of the gateway's saved memory the checkpoint scrub verified (docs/STATUSES.md)."""

    saved: int = Field(
        description="checkpoint receipts the scrub verifies: saved, missing or damaged"
    )
    verified: int = Field(description="found whole by a full read within the full cycle")
    not_verified: int
    missing: int
    damaged: int
    window_seconds: float = Field(
        description="the full cycle, OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS"
    )
    filters: dict[str, dict[str, Any]] = Field(
        description="ReceiptFilter params listing the rows of verified, not_verified, missing, damaged"
    )


class GatewayOut(Schema):
    name: str
    display_name: str
    source: str
    opensquilla_version: str
    schema_version: str
    last_seen_at: int | None
    receipts: int
    at_risk: GatewayAtRiskOut
    hash_mismatches: HashMismatchesOut = Field(
        description="rows health's hash-mismatch heuristic found in the gateway's agents' "
        "windows (their status is not an at-risk one; the state counts them as at risk)"
    )
    # The one state every surface shows (receipts_app.verdict): at_risk, repairing or ok.
    state: str
    state_label: str
    mirror: list[MirrorStateOut]
    mirror_summary: MirrorSummaryOut
    # Who repairs its rows: "gateway" (its own loop) or "console" (handed to this console).
    repairs: str
    repairs_label: str
    # When its ledger was first seen retired by its upgrade to 0.5.5+ (V044), and how many
    # receipts that retired; None / 0 before.
    ledger_retired_at: int | None
    retired_receipts: int
    checkpoints: CheckpointsVerifiedOut


class GatewayListOut(Schema):
    items: list[GatewayOut]


# --- a checkpoint read back (GET /receipts/{id}/checkpoint, receipts_app.restore) ----------


class CheckpointToolCallOut(Schema):
    sequence: int | None
    event_id: str
    role: str = Field(description="tool_call")
    tool_name: str | None
    tool_call_id: str | None
    content: str
    content_type: str
    intact: bool = Field(description="the content still hashes to the event's content_hash")
    truncated: bool


class CheckpointEntryOut(Schema):
    position: int = Field(description="1-based position of the entry in the checkpoint")
    sequence: int | None
    event_id: str
    role: str = Field(description="user, assistant, tool_result or system_notice")
    content: str
    content_type: str
    timestamp_ms: int | None
    tool_call_id: str | None
    token_estimate: int
    intact: bool
    truncated: bool = Field(description="content cut at the page's limit; the download has it all")
    tool_calls: list[CheckpointToolCallOut]
    transcript_entry: str | None = Field(
        description="the live transcript entry it matches, or null: only in the checkpoint"
    )


class TranscriptOnlyOut(Schema):
    entry: str
    role: str
    created_at: int
    preview: str


class CheckpointComparisonOut(Schema):
    same: int
    checkpoint_only: int = Field(description="entries only in the checkpoint (compaction dropped)")
    transcript_only: int = Field(description="live entries the checkpoint does not hold")
    transcript_entries: int
    live_generation: bool = Field(description="the session's current generation is the saved one")
    session_exists: bool
    transcript_only_entries: list[TranscriptOnlyOut]


class LostEntryOut(Schema):
    position: int | None = Field(description="in the checkpoint; null when the file is gone")
    role: str | None
    timestamp_ms: int | None
    preview: str | None
    content_known: bool


class LossOut(Schema):
    receipt_id: str
    file_state: str = Field(description="whole, damaged, missing, unreadable, elsewhere, no_file")
    file_message: str
    covered: int
    exact: bool = Field(description="the coverage hash proves the covered entries by id")
    held_live: int
    held_compacted: int
    held_other_checkpoints: int
    lost_count: int
    lost: list[LostEntryOut]
    retake_possible: bool
    retake_reason: str
    other_checkpoints_read: int
    other_checkpoints_unread: int
    summary: str


class CheckpointFileOut(Schema):
    path: str
    state: str
    message: str
    size_read: int
    sha256: str
    hash_matches: bool
    complete: bool
    bad_lines: list[dict[str, Any]]


class CheckpointReadbackOut(Schema):
    receipt_id: str
    gateway: str
    session_key: str
    session_id: str
    file: CheckpointFileOut
    event_count: int
    entry_count: int
    offset: int
    limit: int
    next_offset: int | None
    entries: list[CheckpointEntryOut]
    comparison: CheckpointComparisonOut
    loss: LossOut | None


class CheckpointPageQuery(Schema):
    offset: int = Field(0, ge=0, description="entries to skip")
    limit: int = Field(100, ge=1, le=500, description="entries with their text")


class ArchiveOut(Schema):
    path: str
    reason: str
    newest_at: int
    receipt_ids: list[str]
    # The status of a repair row of ours for it, once this console repairs the gateway.
    queued_here: str | None


class AgentArchivesOut(Schema):
    gateway: str
    agent_id: str
    count: int
    archives: list[ArchiveOut]


class GatewayArchivesOut(Schema):
    gateway: str
    repairs: str
    repairs_label: str
    ledger_retired_at: int | None
    agents: list[AgentArchivesOut]
