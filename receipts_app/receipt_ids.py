"""The one rule for receipt ids: each must be addressable as one URL path segment.

Every surface names a receipt in its path (``/api/v1/receipts/{id}``, ``…/{id}/requeue``, the
console's ``/receipts/{id}/``). A ``/`` inside an id would split that segment, so the API
refuses such ids (422) and the importer maps them to an addressable form. Any other character
works once percent-encoded.

The ledger's identifier columns (``IDENTIFIER_COLUMNS``) hold no control characters
(``opensquilla_site.identifiers``): the ledger refuses such a write, and the importer and the
mirror skip such a source row and report it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opensquilla_site.identifiers import control_character_problem

SEPARATOR = "/"
RULE = "a receipt_id must not contain '/': it is one URL path segment"
# What the importer writes for a "/" in an upstream id: its percent-encoding, which reads back
# as the same text in every URL and cannot be mistaken for a separator.
ENCODED_SEPARATOR = "%2F"


def check_receipt_id(value: str) -> str:
    """``value`` unchanged, or ValueError naming the rule (a pydantic validator too)."""
    if SEPARATOR in value:
        raise ValueError(RULE)
    return value


def addressable_receipt_id(value: str) -> str:
    """An upstream id as the ledger stores it: every ``/`` percent-encoded."""
    return value.replace(SEPARATOR, ENCODED_SEPARATOR)


# The columns that name or classify a row, and so are never free text.
IDENTIFIER_COLUMNS = (
    "receipt_id",
    "session_key",
    "session_id",
    "idempotency_key",
    "scope",
    "status",
    "resolved_by_receipt_id",
)


def identifier_columns_problem(values: Mapping[str, Any]) -> str | None:
    """``"<column> must not contain control characters…"`` for the first bad identifier column
    among ``values`` (absent and None columns are fine), or None."""
    for name in IDENTIFIER_COLUMNS:
        value = values.get(name)
        if isinstance(value, str):
            problem = control_character_problem(value)
            if problem is not None:
                return f"{name} {problem}"
    return None


def check_identifier_columns(values: Mapping[str, Any]) -> None:
    """ValueError naming the first identifier column that holds a control character."""
    problem = identifier_columns_problem(values)
    if problem is not None:
        raise ValueError(problem)
