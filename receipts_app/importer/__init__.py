"""Import of an OpenSquilla 0.3.0+ ``sessions.db`` and its workspace (see docs/IMPORT.md)."""

from .errors import ImportSourceError
from .report import Counts, FileCounts, ImportReport
from .service import import_opensquilla

__all__ = ["Counts", "FileCounts", "ImportReport", "ImportSourceError", "import_opensquilla"]
