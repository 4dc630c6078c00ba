"""Import of an OpenSquilla ``sessions.db`` (0.3.0 to schema 25) and its workspace.

See docs/IMPORT.md.
"""

from .errors import ImportSourceError
from .report import Counts, FileCounts, ImportReport
from .schema import SchemaVersion, read_schema_version, read_schema_version_at
from .service import import_opensquilla

__all__ = [
    "Counts",
    "FileCounts",
    "ImportReport",
    "ImportSourceError",
    "SchemaVersion",
    "import_opensquilla",
    "read_schema_version",
    "read_schema_version_at",
]
