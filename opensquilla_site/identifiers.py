"""The one rule for identifiers: no control characters.

Session keys, idempotency keys, receipt ids, session ids, scopes and statuses name a row in
URLs, in response headers (``Location``-like links, CSV exports), in log lines and in the
console's links. A line break or another control character in one breaks every one of those
(Django cannot reverse a URL for an id with a newline; a ``\\r\\n`` in an id is a header
injection wherever it is echoed), so every door that writes one refuses it: the API's schemas,
the session and ledger services, the importer and the live mirror.

A control character here is Unicode category ``Cc`` (U+0000–U+001F, U+007F–U+009F: NUL, tab,
line feed, carriage return, escape, DEL, the C1 set) and the line and paragraph separators
U+2028/U+2029, which many tools also treat as line breaks. Free text (reasons, transcript
content, notes) may hold line breaks and is not checked here.
"""

from __future__ import annotations

import re

# One compiled character class: the bulk API checks six columns of 1,000 rows per request.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
RULE = "must not contain control characters (line breaks, tabs, NUL and the like)"
# The longest idempotency key (or session key) any door accepts: the API's PUT refuses a longer
# one, and every key a service composes (a checkpoint's from its session key and turn id) is
# held to the same bound before anything is written.
IDEMPOTENCY_KEY_MAX = 4000


def control_character_problem(value: str) -> str | None:
    """Why ``value`` cannot be an identifier (its first control character), or None."""
    found = _CONTROL.search(value)
    if found is None:
        return None
    return f"{RULE}; found U+{ord(found.group()):04X} at position {found.start()}"


def check_identifier(value: str, name: str) -> str:
    """``value`` unchanged, or ``ValueError("<name> must not contain control characters…")``."""
    problem = control_character_problem(value)
    if problem is not None:
        raise ValueError(f"{name} {problem}")
    return value
