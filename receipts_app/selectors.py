"""Receipt reads shared by the console, the API, the CLI and requeue plans.

One filter type (``ReceiptFilter``) is parsed from query parameters the same way for every
surface, so a filter bookmarked in the console, sent to the API or frozen in a requeue plan
selects the same rows. Lists are keyset-paginated newest first over ``(created_at, id)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from django.conf import settings
from django.db import connection
from django.db.models import Exists, Q, QuerySet

from opensquilla_site.exceptions import ValidationFailed
from opensquilla_site.pagination import MAX_PAGE_SIZE, Page, keyset_page_of_parts
from opensquilla_site.timeutil import now_ms
from sessions_app.gateways import GatewayNameError, using_gateway, validate_gateway_name
from sessions_app.keys import canonicalize_session_key, normalize_agent_id
from sessions_app.models import Session, TranscriptEntry
from sessions_app.services import get_transcript

from . import counts
from .checkpoint import checkpoint_coverage_hash, checkpoint_turn_id
from .ledger import due_q, list_memory_durable_receipts, literal_prefix
from .memory_gap import gap_q
from .models import (
    CheckpointVerification,
    FailureGroupMember,
    MemoryDurableReceipt,
    ReceiptCount,
)
from .statuses import CHECKPOINT_SAVED, KNOWN_STATUSES, SCRUB_VERDICT_STATUSES

COUNT_CAP = 10_000
# A list of up to this many statuses is read one status at a time (``page_receipts``).
MAX_STATUS_PARTS = 32
_MS_MAX = 10**15  # about year 33658: anything larger is a typo, not a time


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        items: Iterable[Any] = value.split(",")
    else:
        items = value
    return [str(v).strip() for v in items if str(v).strip()]


def _as_int(name: str, value: Any, errors: dict[str, str], *, minimum: int = 0) -> int | None:
    if value is None or value == "":
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        errors[name] = f"{name} must be a whole number"
        return None
    if number < minimum or number > _MS_MAX:
        errors[name] = f"{name} is out of range"
        return None
    return number


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _as_time(name: str, value: Any, errors: dict[str, str]) -> int | None:
    """Epoch ms, or an ISO 8601 date/time (UTC when it names no zone), to epoch ms.

    Every surface sends what people type here, so a bad value is refused by name rather
    than dropped: a filter that silently widened would select (and requeue) too much.
    """
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    if text.lstrip("-").isdigit():
        return _as_int(name, text, errors)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        errors[name] = (
            f"{name} must be epoch milliseconds or an ISO 8601 date/time"
            f" (e.g. 2025-01-31 or 2025-01-31T12:00Z), got {text[:40]!r}"
        )
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    # Exact integer milliseconds (floor), where float timestamps could round either way.
    ms = (moment - _EPOCH) // timedelta(milliseconds=1)
    if ms < 0:
        errors[name] = f"{name} is before 1970"
        return None
    return ms


def _as_bool(name: str, value: Any, errors: dict[str, str]) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    errors[name] = f"{name} must be true or false"
    return None


def _fingerprint(value: Any, errors: dict[str, str]) -> str | None:
    """A group fingerprint; unlike other text, an empty one is a value (reasonless failures)."""
    if value is None:
        return None
    text = str(value)
    if len(text) > 300:
        errors["fingerprint"] = "fingerprint is longer than 300 characters"
        return None
    if "\x00" in text:
        errors["fingerprint"] = "fingerprint must not contain NUL characters"
        return None
    return text


def _gap(value: str | None, errors: dict[str, str]) -> str | None:
    if value is None:
        return None
    side = {"true": "any", "1": "any", "yes": "any", "both": "any"}.get(value.lower(), value)
    if side not in {"any", "gateway", "here"}:
        errors["gap"] = "gap must be true (any), gateway or here"
        return None
    return side


VERIFIED_CHOICES = ("ok", "stale", "never", "unsafe")


def _verified(value: str | None, errors: dict[str, str]) -> str | None:
    if value is None:
        return None
    if value.lower() not in VERIFIED_CHOICES:
        errors["verified"] = "verified must be ok, stale, never or unsafe"
        return None
    return value.lower()


def verified_window_ms() -> int:
    """How recent a whole read must be to count as verified: the full cycle
    (``OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS``), the window of every "verified within" figure."""
    try:
        seconds = float(getattr(settings, "OPENSQUILLA_SCRUB_FULL_CYCLE_SECONDS", 86400))
    except (TypeError, ValueError):
        seconds = 86400.0
    return int(max(seconds, 0) * 1000)


def verified_q(choice: str, now: int) -> Q:
    """The checkpoint receipts whose scrub verification is ``choice`` (docs/STATUSES.md#scrub):
    ok: found whole by a full read within the full cycle; stale: a checkpoint the scrub
    verifies (saved, missing or damaged) not found whole within it; never: never verified;
    unsafe: last found missing or damaged."""
    whole = CheckpointVerification.objects.filter(
        outcome="ok", verified_at__gte=now - verified_window_ms()
    ).values("receipt_id")
    checkpoint = Q(scope="checkpoint")
    if choice == "ok":
        return checkpoint & Q(id__in=whole)
    if choice == "stale":
        scrubbed = Q(status__in=(CHECKPOINT_SAVED, *SCRUB_VERDICT_STATUSES))
        return checkpoint & scrubbed & ~Q(id__in=whole)
    if choice == "never":
        return checkpoint & ~Q(id__in=CheckpointVerification.objects.values("receipt_id"))
    unsafe = CheckpointVerification.objects.exclude(outcome="ok").values("receipt_id")
    return checkpoint & Q(id__in=unsafe)


FilterKind = Literal["many", "text", "time", "count", "flag"]


@dataclass(frozen=True)
class FilterField:
    """One receipt filter parameter. The API's query schema and the CLI's flags
    (``--session-key`` for ``session_key``) are generated from ``RECEIPT_FILTER_FIELDS``."""

    param: str
    kind: FilterKind
    help: str
    max_length: int = 1000

    @property
    def flag(self) -> str:
        return "--" + self.param.replace("_", "-")


_TIME_HELP = "epoch ms or ISO 8601 date/time, UTC when naive"
RECEIPT_FILTER_FIELDS: tuple[FilterField, ...] = (
    FilterField("status", "many", "receipt status (repeat or comma-separate)", 64),
    FilterField(
        "scope", "many", "checkpoint, preimage, flush or repair (repeat or comma-separate)"
    ),
    FilterField("agent", "text", "agent id, e.g. main", 64),
    FilterField("session_key", "text", "exact session key (canonicalised)", 2000),
    FilterField("session_key_prefix", "text", "literal session-key prefix", 2000),
    FilterField("session_id", "text", "session generation id", 200),
    FilterField("idempotency_key", "text", "exact idempotency key", 4000),
    FilterField("reason", "text", "case-insensitive text the reason contains", 500),
    FilterField("created_from", "time", f"created at or after: {_TIME_HELP}"),
    FilterField("created_to", "time", f"created at or before: {_TIME_HELP}"),
    FilterField("updated_from", "time", f"updated at or after: {_TIME_HELP}"),
    FilterField("updated_to", "time", f"updated at or before: {_TIME_HELP}"),
    FilterField("attempts_min", "count", "minimum attempt_count"),
    FilterField("attempts_max", "count", "maximum attempt_count"),
    FilterField("due", "flag", "true: due for the repair worker now; false: waiting"),
    FilterField("receipt_id", "many", "a receipt id (repeat or comma-separate)"),
    FilterField("gateway", "text", "gateway name (a slug); every gateway when absent", 64),
    FilterField(
        "fingerprint",
        "text",
        "a failure group's error fingerprint, as the overview shows it (empty: no reason); "
        "with agent, scope and status, exactly the receipts the group counts",
        300,
    ),
    FilterField(
        "gap",
        "text",
        "the memory gap (docs/MIRROR.md): true, any or both: mirrored receipts the gateway "
        "and this console count differently; gateway: open at the gateway, resolved here; "
        "here: open here, closed at the gateway",
        16,
    ),
    FilterField(
        "verified",
        "text",
        "the checkpoint scrub (docs/STATUSES.md): ok: found whole within the full cycle; "
        "stale: not found whole within it; never: never verified; unsafe: last found missing "
        "or damaged",
        16,
    ),
)
_FIELD = {f.param: f for f in RECEIPT_FILTER_FIELDS}


@dataclass(frozen=True)
class ReceiptFilter:
    statuses: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    agent: str | None = None
    session_key: str | None = None
    session_key_prefix: str | None = None
    session_id: str | None = None
    idempotency_key: str | None = None
    reason_contains: str | None = None
    created_from: int | None = None
    created_to: int | None = None
    updated_from: int | None = None
    updated_to: int | None = None
    attempts_min: int | None = None
    attempts_max: int | None = None
    due: bool | None = None
    receipt_ids: tuple[str, ...] = field(default=())
    # Every gateway when None (sessions_app.gateways: an edge may still have chosen one).
    gateway: str | None = None
    # A failure group's fingerprint ("" is the group of receipts without a reason).
    fingerprint: str | None = None
    # The memory gap (receipts_app.memory_gap): "any", "gateway" or "here".
    gap: str | None = None
    # The checkpoint scrub's verification (``VERIFIED_CHOICES``).
    verified: str | None = None

    PARAMS = tuple(f.param for f in RECEIPT_FILTER_FIELDS)

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ReceiptFilter:
        """Parse query parameters (a QueryDict or a dict). Raises ``ValidationFailed``.

        Multi-valued parameters (status, scope, receipt_id) accept repeats or commas.
        Unknown statuses are allowed on purpose: the ledger's status column is free text.
        """
        errors: dict[str, str] = {}

        def many(name: str) -> list[str]:
            getlist = getattr(params, "getlist", None)
            raw = getlist(name) if getlist else params.get(name)
            values: list[str] = []
            for item in raw if isinstance(raw, list | tuple) else [raw]:
                # A JSON filter (a plan, the API) can hold any type where text goes.
                if item is not None and not isinstance(item, str):
                    errors[name] = f"{name} must be text or a list of text"
                    return []
                if item and "\x00" in item:
                    errors[name] = f"{name} must not contain NUL characters"
                    return []
                values.extend(_as_list(item))
            return values

        def text(name: str) -> str | None:
            limit = _FIELD[name].max_length
            value = params.get(name)
            if value is None or str(value).strip() == "":
                return None
            if isinstance(value, bool) or not isinstance(value, str | int):
                errors[name] = f"{name} must be text"
                return None
            value = str(value)
            if len(value) > limit:
                errors[name] = f"{name} is longer than {limit} characters"
                return None
            if "\x00" in value:
                errors[name] = f"{name} must not contain NUL characters"
                return None
            return value

        statuses = tuple(dict.fromkeys(many("status")))
        for status in statuses:
            if len(status) > _FIELD["status"].max_length:
                errors["status"] = f"status is longer than {_FIELD['status'].max_length} characters"
        scopes = tuple(dict.fromkeys(many("scope")))
        agent = text("agent")
        session_key = text("session_key")
        gateway = text("gateway")
        if gateway is not None and "gateway" not in errors:
            try:
                validate_gateway_name(gateway)
            except GatewayNameError as exc:
                errors["gateway"] = str(exc)
                gateway = None
        result = cls(
            statuses=statuses,
            scopes=scopes,
            agent=normalize_agent_id(agent) if agent else None,
            session_key=canonicalize_session_key(session_key) if session_key else None,
            session_key_prefix=text("session_key_prefix"),
            session_id=text("session_id"),
            idempotency_key=text("idempotency_key"),
            reason_contains=text("reason"),
            created_from=_as_time("created_from", params.get("created_from"), errors),
            created_to=_as_time("created_to", params.get("created_to"), errors),
            updated_from=_as_time("updated_from", params.get("updated_from"), errors),
            updated_to=_as_time("updated_to", params.get("updated_to"), errors),
            attempts_min=_as_int("attempts_min", params.get("attempts_min"), errors),
            attempts_max=_as_int("attempts_max", params.get("attempts_max"), errors),
            due=_as_bool("due", params.get("due"), errors),
            receipt_ids=tuple(dict.fromkeys(many("receipt_id")))[: MAX_PAGE_SIZE * 2],
            gateway=gateway,
            fingerprint=_fingerprint(params.get("fingerprint"), errors),
            gap=_gap(text("gap"), errors),
            verified=_verified(text("verified"), errors),
        )
        if errors:
            raise ValidationFailed("; ".join(errors.values()), extra={"fields": errors})
        return result

    def to_params(self) -> dict[str, Any]:
        """The query parameters that parse back to this filter (URLs, frozen plans)."""
        out: dict[str, Any] = {}
        names = {
            "statuses": "status",
            "scopes": "scope",
            "reason_contains": "reason",
            "receipt_ids": "receipt_id",
        }
        for f in fields(self):
            value = getattr(self, f.name)
            if value in (None, ()):
                continue
            key = names.get(f.name, f.name)
            if isinstance(value, tuple):
                out[key] = list(value)
            elif isinstance(value, bool):
                out[key] = "true" if value else "false"
            else:
                out[key] = value
        return out

    def with_statuses(self, *statuses: str) -> ReceiptFilter:
        values = asdict(self)
        values["statuses"] = tuple(statuses)
        return ReceiptFilter(**values)

    @property
    def is_empty(self) -> bool:
        return not self.to_params()


def filter_receipts(
    receipt_filter: ReceiptFilter, *, now: int | None = None
) -> QuerySet[MemoryDurableReceipt]:
    f = receipt_filter
    qs: QuerySet[MemoryDurableReceipt] = MemoryDurableReceipt.objects.of_gateway(f.gateway)
    if f.statuses:
        qs = qs.filter(status__in=f.statuses)
    if f.scopes:
        qs = qs.filter(scope__in=f.scopes)
    if f.agent:
        qs = qs.filter(agent_id=f.agent)
    if f.session_key:
        qs = qs.filter(session_key=f.session_key)
    if f.session_key_prefix:
        qs = literal_prefix(qs, "session_key", f.session_key_prefix)
    if f.session_id:
        qs = qs.filter(session_id=f.session_id)
    if f.idempotency_key:
        qs = qs.filter(idempotency_key=f.idempotency_key)
    if f.reason_contains:
        qs = qs.filter(reason__icontains=f.reason_contains)
    if f.created_from is not None:
        qs = qs.filter(created_at__gte=f.created_from)
    if f.created_to is not None:
        qs = qs.filter(created_at__lte=f.created_to)
    if f.updated_from is not None:
        qs = qs.filter(updated_at__gte=f.updated_from)
    if f.updated_to is not None:
        qs = qs.filter(updated_at__lte=f.updated_to)
    if f.attempts_min is not None:
        qs = qs.filter(attempt_count__gte=f.attempts_min)
    if f.attempts_max is not None:
        qs = qs.filter(attempt_count__lte=f.attempts_max)
    if f.due is not None:
        due = due_q(now if now is not None else now_ms())
        qs = qs.filter(due) if f.due else qs.exclude(due)
    if f.receipt_ids:
        qs = qs.filter(receipt_id__in=f.receipt_ids)
    if f.fingerprint is not None:
        # The receipts folded into a group of this fingerprint (receipts_app.failure_groups),
        # not a reason text match: look-alike groups share text, never a fingerprint.
        members = FailureGroupMember.objects.filter(fingerprint=f.fingerprint)
        qs = qs.filter(receipt_id__in=members.values("receipt_id"))
    if f.gap is not None:
        qs = qs.filter(gap_q(None if f.gap == "any" else f.gap))
    if f.verified is not None:
        qs = qs.filter(verified_q(f.verified, now if now is not None else now_ms()))
    return qs


def page_receipts(
    receipt_filter: ReceiptFilter,
    *,
    cursor: str | None = None,
    limit: int = 50,
    for_console: bool = False,
) -> Page:
    """One page of the filter's receipts, newest first (console list, API, CLI export).

    Several statuses are read one status at a time: ``status IN (…)`` has no index in the
    page's order, so PostgreSQL would walk ``idx_mdr_created`` and keep the rows of those
    statuses (tens of thousands of rows for a rare status on one gateway), where ``status =
    s`` ordered by time walks ``idx_mdr_status_created`` and stops at the page size. The
    page is the first ``limit`` of the statuses' own pages (``keyset_page_of_parts``), every
    other criterion applied to each: the same rows in the same order, in one query.
    """
    f = receipt_filter
    statuses = tuple(dict.fromkeys(f.statuses))
    if 1 < len(statuses) <= MAX_STATUS_PARTS:
        parts = [_unless_uncounted(filter_receipts(f.with_statuses(s)), f, s) for s in statuses]
    else:
        one = statuses[0] if len(statuses) == 1 else None
        parts = [_unless_uncounted(filter_receipts(f), f, one)]
    if for_console:
        parts = [qs.for_console().with_verification() for qs in parts]  # type: ignore[attr-defined]
    return keyset_page_of_parts(parts, cursor=cursor, limit=limit)


def _unless_uncounted(
    qs: QuerySet[MemoryDurableReceipt], f: ReceiptFilter, status: str | None
) -> QuerySet[MemoryDurableReceipt]:
    """``qs``, read only when the counts table holds a receipt of its gateway, agent, scopes
    and ``status``.

    Walking an index in time order keeps the rows of one gateway (or agent): when it has
    none of that status, the walk reads every row of the status before it answers nothing
    (all 5,000 ``repair_failed`` rows of other gateways for an empty *given up* list). The
    counts are exact in the statement's own snapshot (``receipts_app.counts``), so an
    uncorrelated ``EXISTS`` on them (evaluated once, before the walk) skips that walk and
    never a row. Only the criteria the counts table knows are checked; the rest stay in ``qs``.
    """
    criteria: dict[str, Any] = {}
    if f.gateway is not None:
        criteria["gateway_id"] = f.gateway
    if f.agent:
        criteria["agent_id"] = f.agent
    if f.scopes:
        criteria["scope__in"] = f.scopes
    if not criteria:  # the walk is an index seek already (or no filter at all)
        return qs
    if status is not None:
        criteria["status"] = status
    elif f.statuses:
        criteria["status__in"] = f.statuses
    return qs.filter(Exists(ReceiptCount.objects.filter(n__gt=0, **criteria)))


def capped_count(qs: QuerySet[Any], cap: int = COUNT_CAP) -> int:
    """``min(count, cap + 1)`` without counting past the cap (shown as "10,000+")."""
    return qs.order_by()[: cap + 1].count()


def capped_counts(querysets: Mapping[str, QuerySet[Any]], cap: int = COUNT_CAP) -> dict[str, int]:
    """``capped_count`` of each queryset, all in one query (one scalar sub-select each)."""
    if not querysets:
        return {}
    parts: list[str] = []
    params: list[Any] = []
    for qs in querysets.values():
        sql, sub_params = qs.order_by().values("id")[: cap + 1].query.sql_with_params()
        parts.append(f"(SELECT COUNT(*) FROM ({sql}) AS capped)")  # noqa: S608 - ORM-compiled
        params.extend(sub_params)
    with connection.cursor() as cur:
        cur.execute("SELECT " + ", ".join(parts), params)
        values = cur.fetchone()
    return {name: int(n) for name, n in zip(querysets, values, strict=True)}


# Filter fields the counts table can answer exactly; any other criterion needs a capped count.
_COUNTED_FIELDS = frozenset({"statuses", "scopes", "agent", "gateway"})


@dataclass(frozen=True)
class TabCounts:
    """Receipts per status under a filter's other criteria, and the filter's own total.

    ``exact``: read from the counts table (agent, scope and status filters); otherwise every
    number is capped at ``COUNT_CAP`` + 1 and reads "10,000+" past it.
    """

    per_status: dict[str, int]
    total: int
    exact: bool


def tab_counts(receipt_filter: ReceiptFilter, cap: int = COUNT_CAP) -> TabCounts:
    """The status tabs' counts and the "N matching" total: one query whatever the filter."""
    f = receipt_filter
    used = {x.name for x in fields(f) if getattr(f, x.name) not in (None, ())}
    if used <= _COUNTED_FIELDS:
        per = counts.per_status(
            counts.receipt_counts(), agent=f.agent, scopes=f.scopes, gateway=f.gateway
        )
        wanted = f.statuses or tuple(per)
        return TabCounts(per, sum(per.get(s, 0) for s in wanted), exact=True)
    base = filter_receipts(f.with_statuses())
    found = capped_counts(
        {
            **{status: base.filter(status=status) for status in KNOWN_STATUSES},
            "": filter_receipts(f),
        },
        cap,
    )
    total = found.pop("")
    return TabCounts(found, total, exact=False)


def status_counts(receipt_filter: ReceiptFilter, cap: int = COUNT_CAP) -> dict[str, int]:
    """Counts per known status under the filter's other criteria (see ``tab_counts``)."""
    per = tab_counts(receipt_filter, cap).per_status
    return {status: per.get(status, 0) for status in KNOWN_STATUSES}


def current_checkpoint_coverage(session: Session) -> tuple[MemoryDurableReceipt | None, int]:
    """The saved checkpoint that covers the live transcript exactly, and the entry count.

    This is upstream's exact coverage lookup (docs/UPSTREAM.md#what-gates-destructive-operations): same generation, same coverage
    triple, ``checkpoint_saved``. A checkpoint taken before later messages does not count.
    """
    with using_gateway(session.gateway_id):
        return _coverage(session)


def _coverage(session: Session) -> tuple[MemoryDurableReceipt | None, int]:
    # A covering checkpoint records the transcript's entry count: without a saved checkpoint of
    # this generation at the current count, nothing need be read or hashed (a long session
    # whose messages are rewritten while it streams costs a count, not its whole transcript).
    count = TranscriptEntry.objects.here().filter(session_id=session.session_id).count()
    if not count:
        return None, 0
    candidate = MemoryDurableReceipt.objects.here().filter(
        session_key=session.session_key,
        session_id=session.session_id,
        scope="checkpoint",
        status=CHECKPOINT_SAVED,
        coverage_entry_count=count,
    )
    if not candidate.exists():
        return None, count
    entries = get_transcript(session.session_id)
    if not entries:
        return None, 0
    rows = list_memory_durable_receipts(
        session_key=session.session_key,
        session_id=session.session_id,
        scope="checkpoint",
        status=CHECKPOINT_SAVED,
        coverage_turn_id=checkpoint_turn_id(entries),
        coverage_hash=checkpoint_coverage_hash(entries),
        coverage_entry_count=len(entries),
        limit=1,
    )
    return (rows[0] if rows else None), len(entries)


def get_receipt(receipt_id: str) -> MemoryDurableReceipt:
    row = MemoryDurableReceipt.objects.filter(receipt_id=receipt_id).first()
    if row is None:
        raise KeyError(f"Memory durable receipt not found: {receipt_id}")
    return row
