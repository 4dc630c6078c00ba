"""The embedded default's Celery broker: kombu's SQLAlchemy transport on a SQLite file.

``CELERY_BROKER_URL=sqlite:///<var>/celery-broker.sqlite3`` (the default). A message is one
row: a publish is one INSERT and a fetch takes the oldest visible row and hides it inside one
``BEGIN IMMEDIATE`` transaction, so a reader never sees a message its writer has not finished
(kombu's filesystem transport hands a reader a file its writer has created but not yet filled,
and the worker dies on it) and two readers never take the same one.

Three additions to kombu's transport, all for the embedded case only:
- Processes starting together on a fresh file race to create the tables and the queue rows;
  kombu lets the loser die (``table … already exists``, ``UNIQUE constraint failed:
  kombu_queue.name``: a worker started beside web and beat crashed on it). The loser here
  finds what the winner created.
- The file is looked for before every publish and fetch. A missing file (or folder) is
  recreated with its tables, and the process's pooled connections to the old one are dropped:
  kombu creates the tables only once per process, so without this every process would keep
  failing on "no such table" until restarted.
- Fetched rows are kept by kombu (``visible = 0``); ``prune_delivered`` deletes the old ones
  (beat runs it hourly) so the file does not grow forever.

The transport is registered under the URL scheme ``sqlite`` (``register()``, called when the
Celery app is created), so the URL is also the SQLAlchemy URL of the file. The message is
never acknowledged to the broker: a worker killed mid-task loses its message, and the outbox
(``receipts_app.enqueue``) sends that work again.
"""

from __future__ import annotations

import datetime
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from kombu.transport import TRANSPORT_ALIASES
from kombu.transport import sqlalchemy as kombu_sql
from kombu.transport.sqlalchemy.models import metadata
from sqlalchemy.exc import IntegrityError, OperationalError

SCHEME = "sqlite"
FILE_NAME = "celery-broker.sqlite3"
# Seconds a publish or fetch waits for the file's write lock before it fails.
LOCK_TIMEOUT_SECONDS = 5
# Delivered rows older than this are deleted by ``prune_delivered``.
KEEP_DELIVERED_SECONDS = 3600

_recreate_lock = threading.Lock()


def default_url(var_dir: Path) -> str:
    return f"{SCHEME}:///{var_dir / FILE_NAME}"


def is_embedded(url: str) -> bool:
    return urlsplit(url).scheme == SCHEME


def database_path(url: str) -> Path:
    """The file behind a ``sqlite:///`` broker URL."""
    path = urlsplit(url).path
    # sqlite:////abs/path has path "//abs/path"; sqlite:///rel has "/rel".
    return Path(path[1:]) if path.startswith("//") else Path(path.lstrip("/"))


def transport_options() -> dict[str, Any]:
    """kombu passes these to ``create_engine``: wait for the write lock, never forever."""
    return {"connect_args": {"timeout": LOCK_TIMEOUT_SECONDS}}


class Channel(kombu_sql.Channel):
    """kombu's SQL channel, recreating the SQLite file when it has gone."""

    def _path(self) -> Path:
        # A channel always belongs to a transport, and a transport to a connection.
        assert self.connection is not None and self.connection.client is not None
        return database_path(str(self.connection.client.hostname))

    def _open(self) -> Any:
        # SQLite creates a missing file, not a missing folder.
        self._path().parent.mkdir(parents=True, exist_ok=True)
        try:
            return super()._open()
        except OperationalError:
            # Another process created the tables between kombu's check and its CREATE; kombu
            # caches the engine only after creating them, so this try starts clean.
            return super()._open()

    def _get_or_create(self, queue: str) -> Any:
        try:
            return super()._get_or_create(queue)  # type: ignore[misc]  # kombu's, unstubbed
        except IntegrityError:
            # Another process inserted the queue between kombu's look-up and its insert.
            self.session.rollback()
            return super()._get_or_create(queue)  # type: ignore[misc]  # kombu's, unstubbed

    def _ensure_file(self) -> None:
        path = self._path()
        if path.exists():
            return
        with _recreate_lock:
            if path.exists():
                return
            engine, _session_cls = self._open()
            # Pooled connections still point at the old file (or at nothing).
            if self._session is not None:
                self._session.close()
            engine.dispose()
            metadata.create_all(engine)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        self._ensure_file()
        super()._new_queue(queue, **kwargs)

    # kombu's own signature; its type stubs name the second argument differently.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._ensure_file()
        super()._put(queue, payload, **kwargs)

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        self._ensure_file()
        return super()._get(queue)


class Transport(kombu_sql.Transport):
    Channel = Channel


def register() -> None:
    """Let ``sqlite:///…`` broker URLs reach this transport (idempotent)."""
    TRANSPORT_ALIASES.setdefault(SCHEME, f"{__name__}:Transport")


def _connect(url: str) -> sqlite3.Connection:
    path = database_path(url)
    if not path.exists():
        raise FileNotFoundError(f"broker file {path} does not exist yet")
    return sqlite3.connect(path, timeout=LOCK_TIMEOUT_SECONDS)


def queue_depths(url: str) -> dict[str, int]:
    """Messages waiting in each queue (visible rows), read straight from the file."""
    with _connect(url) as db:
        try:
            rows = db.execute(
                "SELECT q.name, COUNT(m.id) FROM kombu_queue q "
                "LEFT JOIN kombu_message m ON m.queue_id = q.id AND m.visible = 1 "
                "GROUP BY q.name"
            ).fetchall()
        except sqlite3.OperationalError:
            return {}  # no tables yet: nothing was ever published
    return {str(name): int(count) for name, count in rows}


def waiting_task_ids(url: str, queues: list[str]) -> set[str]:
    """The task ids of the messages waiting (visible rows) in ``queues``."""
    if not queues:
        return set()
    try:
        with _connect(url) as db:
            rows = db.execute(
                "SELECT json_extract(m.payload, '$.headers.id') FROM kombu_message m "
                "JOIN kombu_queue q ON q.id = m.queue_id "
                "WHERE q.name IN (SELECT value FROM json_each(?)) AND m.visible = 1",
                (json.dumps(queues),),
            ).fetchall()
    except FileNotFoundError:
        return set()  # never published to
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return set()
        raise
    return {str(task_id) for (task_id,) in rows if task_id}


def check(url: str) -> str:
    """Readiness: the broker file (or its folder, where it will be created) is usable."""
    path = database_path(url)
    if not path.exists():
        if path.parent.is_dir():
            return "broker file is created on first use"
        raise OSError(f"broker folder {path.parent} is missing")
    with _connect(url) as db:
        db.execute("SELECT 1").fetchone()
    return "broker file readable"


def prune_delivered(url: str, *, keep_seconds: int = KEEP_DELIVERED_SECONDS) -> int:
    """Delete messages delivered more than ``keep_seconds`` ago; returns how many."""
    # kombu stamps a row with local naive time when it is delivered (visible set to 0).
    cutoff = datetime.datetime.now() - datetime.timedelta(seconds=keep_seconds)  # noqa: DTZ005
    try:
        with _connect(url) as db:
            cursor = db.execute(
                "DELETE FROM kombu_message WHERE visible = 0 AND timestamp < ?",
                (cutoff.isoformat(sep=" "),),
            )
            return cursor.rowcount
    except (FileNotFoundError, sqlite3.OperationalError):
        return 0
