from __future__ import annotations

from opensquilla_site.exceptions import ValidationFailed


class ImportSourceError(ValidationFailed):
    """The source database or workspace cannot be imported; nothing was written."""

    code = "invalid_import_source"
