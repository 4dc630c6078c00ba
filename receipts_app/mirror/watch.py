"""The followed file: opened read-only, its identity, and a cheap "did anything change?".

Idle cost is one ``stat`` of the database and its WAL plus ``PRAGMA data_version`` on a kept
connection (it moves whenever another connection commits). The stat also spots a replaced
file: a new inode, or the path gone, closes the connection and the next poll opens the new
file. Nothing here writes: the URI says ``mode=ro`` and the connection is ``query_only``.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..importer import ImportSourceError
from ..importer.source import SQLITE_MAGIC, SourceDatabase


class SourceProblem(Exception):
    """The source cannot be followed right now; ``code`` names why (shown to operators)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class FileStamp:
    """What ``stat`` says about the database and its WAL: a change in any field is a change."""

    dev: int
    inode: int
    size: int
    mtime_ns: int
    wal_size: int
    wal_mtime_ns: int


def stamp(path: Path) -> FileStamp:
    try:
        main = path.stat()
    except FileNotFoundError as exc:
        raise SourceProblem("missing", f"{path} does not exist") from exc
    except OSError as exc:
        raise SourceProblem("unreadable", f"{path} cannot be read: {exc.strerror}") from exc
    try:
        wal = os.stat(f"{path}-wal")
        wal_size, wal_mtime = wal.st_size, wal.st_mtime_ns
    except OSError:
        wal_size, wal_mtime = -1, -1
    return FileStamp(main.st_dev, main.st_ino, main.st_size, main.st_mtime_ns, wal_size, wal_mtime)


def _rewritten(before: FileStamp, after: FileStamp, path: Path) -> bool:
    """Signs that the file was replaced by other bytes rather than written by SQLite: it
    shrank, its WAL vanished while the writer had one, or it no longer starts with the magic."""
    if after.size < before.size or (before.wal_size >= 0 and after.wal_size < 0):
        return True
    if after.size == before.size and after.mtime_ns == before.mtime_ns:
        return False
    try:
        with path.open("rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) != SQLITE_MAGIC
    except OSError:
        return True


def classify(exc: BaseException, path: Path) -> SourceProblem:
    """One operator-facing problem for whatever opening or reading the source raised."""
    if isinstance(exc, SourceProblem):
        return exc
    text = str(getattr(exc, "message", None) or exc)
    lowered = text.lower()
    if "locked" in lowered or "busy" in lowered:
        return SourceProblem("locked", f"{path} is locked by its writer; retrying")
    if "does not exist" in lowered:
        return SourceProblem("missing", text)
    if "not an opensquilla" in lowered:
        return SourceProblem("not_opensquilla", text)
    # Before "not readable": a truncated file opens, then fails with "disk image is malformed".
    if "corrupt" in lowered or "malformed" in lowered or "disk image" in lowered:
        return SourceProblem("corrupt", text)
    if "not an sqlite" in lowered or "not a readable sqlite" in lowered:
        return SourceProblem("not_sqlite", text)
    if isinstance(exc, ImportSourceError):
        return SourceProblem("bad_row", text)
    return SourceProblem("unreadable", text)


class WatchedSource:
    """A kept read-only connection to the source, reopened when the file changes identity."""

    def __init__(self, path: Path, *, busy_timeout: float = 2.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self.db: SourceDatabase | None = None
        self._stamp: FileStamp | None = None
        self._data_version: int | None = None
        self._application_id = 0

    @property
    def identity(self) -> dict[str, Any]:
        assert self.db is not None and self._stamp is not None
        return {
            "dev": self._stamp.dev,
            "inode": self._stamp.inode,
            "application_id": self._application_id,
        }

    def open(self) -> SourceDatabase:
        """The connection, (re)opened when needed; raises ``SourceProblem``."""
        current = stamp(self.path)
        if self.db is not None and self._stamp is not None:
            if (current.dev, current.inode) == (self._stamp.dev, self._stamp.inode):
                return self.db
            self.close()  # replaced: the old connection still reads the unlinked file
        try:
            db = SourceDatabase(self.path, busy_timeout=self.busy_timeout)
            self._application_id = int(db.conn.execute("PRAGMA application_id").fetchone()[0])
        except (ImportSourceError, sqlite3.DatabaseError) as exc:
            raise classify(exc, self.path) from exc
        self.db = db
        self._stamp = current
        self._data_version = None
        return db

    def changed(self) -> bool:
        """True when the source may hold something not read yet (always after a reopen)."""
        db = self.open()
        current = stamp(self.path)
        if self._stamp is not None and _rewritten(self._stamp, current, self.path):
            # Overwritten in place (same inode): the kept connection would go on reading the
            # old pages through its WAL index, so open the file again and validate it.
            self.close()
            db = self.open()
        try:
            version = db.data_version()
        except ImportSourceError as exc:
            self.close()
            raise classify(exc, self.path) from exc
        changed = self._data_version is None or version != self._data_version
        changed = changed or current != self._stamp
        self._stamp = current
        self._data_version = version
        return changed

    def forget_version(self) -> None:
        """Make the next ``changed`` true: a pass that failed must be retried."""
        self._data_version = None

    def close(self) -> None:
        if self.db is not None:
            try:
                self.db.conn.close()
            except sqlite3.Error:
                pass
        self.db = None
        self._stamp = None
        self._data_version = None
