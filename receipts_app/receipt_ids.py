"""The one rule for receipt ids: each must be addressable as one URL path segment.

Every surface names a receipt in its path (``/api/v1/receipts/{id}``, ``…/{id}/requeue``, the
console's ``/receipts/{id}/``). A ``/`` inside an id would split that segment, so the API
refuses such ids (422) and the importer maps them to an addressable form. Any other character
works once percent-encoded.
"""

from __future__ import annotations

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
