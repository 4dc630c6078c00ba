"""Value types shared by the flush package (docs/UPSTREAM.md#flush).

Everything here is plain Python so the flush service can run in a Celery worker, a
management command or a unit test without Django being configured.
"""

from __future__ import annotations

import contextvars
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

FlushMode = Literal["llm", "raw", "skipped", "error"]
RawReason = Literal["timeout", "llm_error", "no_provider", "no_tools", "preimage"]
FlushResultStatus = Literal[
    "unknown",
    "skipped",
    "ok_candidates_written",
    "ok_noop_no_memory",
    "ok_archive_only",
    "parse_failed_archived",
    "provider_failed_archived",
    "apply_failed_archived",
    "archive_failed",
]
SegmentMode = Literal["off", "auto", "always"]
RawCapturePolicy = Literal["off", "best_effort", "required"]
OutputCoverageStatus = Literal["ok", "coverage_warning", "unverifiable"]
ObligationStatus = Literal["ok", "backfilled", "coverage_warning", "unverifiable"]

FLUSH_OBLIGATION_POLICY_VERSION = "temporal-source-obligation-v1"

# The degraded statuses that still leave a raw archive behind for the repair worker.
ARCHIVED_RESULT_STATUSES: frozenset[str] = frozenset(
    {
        "ok_archive_only",
        "parse_failed_archived",
        "provider_failed_archived",
        "apply_failed_archived",
    }
)
NOOP_RESULT_STATUSES: frozenset[str] = frozenset({"ok_noop_no_memory"})


class ProviderCompletionError(RuntimeError):
    """The provider failed to produce a completion (HTTP error, stream error, timeout).

    It subclasses RuntimeError like upstream, but the service checks for it first, so it
    maps to ``provider_failed_archived`` rather than ``apply_failed_archived``.
    """

    def __init__(self, message: str, *, code: str = "") -> None:
        super().__init__(f"provider error: {message}")
        self.code = code


@dataclass(frozen=True)
class Message:
    """One transcript message.

    Only ``role`` and ``content`` are required. ``message_id`` and ``created_at`` (epoch ms,
    epoch seconds, ISO text or a datetime) feed the ``[opensquilla-message: ...]`` source
    prefix; callers that leave them out get the bare text, as the golden archives show.
    """

    role: str
    content: Any
    message_id: str | None = None
    created_at: Any = None
    # Carried so a transcript row can be passed through unchanged; the flush ignores them.
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True)
class ToolCall:
    tool_use_id: str
    tool_name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ToolResult:
    tool_use_id: str
    content: str
    is_error: bool = False
    tool_name: str = ""


@dataclass(frozen=True)
class ToolDefinition:
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True)
class ToolContext:
    """Who is calling a tool. The flush sets it so memory_save knows the agent."""

    agent_id: str
    is_owner: bool = True
    caller_kind: str = "agent"
    interaction_mode: str = "unattended"
    channel_kind: str = "flush"
    source_kind: str = "flush"
    source_name: str = "pure-extract"
    allowed_tools: frozenset[str] = frozenset({"memory_save"})


# A context variable, not an argument, so tool handlers keep the plain (ToolCall) signature.
current_tool_context: contextvars.ContextVar[ToolContext | None] = contextvars.ContextVar(
    "opensquilla_flush_tool_context", default=None
)


@dataclass(frozen=True)
class FlushReceipt:
    """Outcome of one flush; the modes are mutually exclusive.

    ``raw_reason`` is set exactly when ``mode == "raw"``, ``error`` exactly when
    ``mode == "error"``, and ``slug`` only for LLM writes. ``content_hash`` is the archive
    hash for raw receipts and sha256 of the rendered markdown for LLM writes (6.6).
    """

    mode: FlushMode
    flushed_paths: list[str]
    slug: str | None
    message_count: int
    duration_ms: int
    raw_reason: RawReason | None
    error: str | None
    result_status: FlushResultStatus = "unknown"
    raw_error_type: str | None = None
    raw_error_message: str | None = None
    raw_error_code: str | None = None
    input_message_count: int = 0
    selected_start_index: int | None = None
    prompt_message_count: int = 0
    prompt_char_count: int = 0
    truncated: bool = False
    truncation_policy: str = ""
    first_included_message: int | None = None
    last_included_message: int | None = None
    source_coverage: float = 0.0
    segment_mode: str = "off"
    segment_count: int = 0
    segments: list[dict[str, Any]] = field(default_factory=list)
    total_prompt_char_count: int = 0
    integrity_status: str = "unverified"
    indexed_chunk_count: int = 0
    candidate_count: int = 0
    candidate_covered_count: int = 0
    candidate_missing_ids: list[str] = field(default_factory=list)
    candidate_source_coverage: float = 0.0
    prompt_message_source_coverage: float = 0.0
    output_coverage_status: OutputCoverageStatus = "unverifiable"
    invalid_candidate_count: int = 0
    invalid_candidate_errors: list[str] = field(default_factory=list)
    obligation_count: int = 0
    obligation_covered_count: int = 0
    obligation_missing_ids: list[str] = field(default_factory=list)
    obligation_coverage: float = 0.0
    obligation_backfilled_count: int = 0
    obligation_status: ObligationStatus = "unverifiable"
    obligation_policy_version: str = FLUSH_OBLIGATION_POLICY_VERSION
    session_id: str | None = None
    turn_id: str | None = None
    source_path: str | None = None
    content_hash: str | None = None

    def __post_init__(self) -> None:
        # Ledger consumers branch on mode; an inconsistent receipt must fail at construction.
        if (self.raw_reason is not None) != (self.mode == "raw"):
            raise ValueError(f"raw_reason must be set iff mode == 'raw' (mode={self.mode!r})")
        if (self.error is not None) != (self.mode == "error"):
            raise ValueError(f"error must be set iff mode == 'error' (mode={self.mode!r})")
        if self.slug is not None and self.mode != "llm":
            raise ValueError(f"slug is only valid for mode 'llm' (mode={self.mode!r})")
        if self.mode == "skipped" and (self.flushed_paths or self.message_count):
            raise ValueError("a skipped receipt has no paths and no messages")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
