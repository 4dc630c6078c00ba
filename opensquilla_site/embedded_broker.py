"""The embedded default's Celery broker: kombu's SQLAlchemy transport on a SQLite file.

``CELERY_BROKER_URL=sqlite:///<var>/celery-broker.sqlite3`` (the default). A message is one
row: a publish is one INSERT, and a fetch hides the oldest visible row and returns it with one
``UPDATE … RETURNING`` inside a ``BEGIN IMMEDIATE`` transaction, so a reader never sees a
message its writer has not finished (kombu's filesystem transport hands a reader a file its
writer has created but not yet filled, and the worker dies on it) and two readers never take
the same one.

Additions to kombu's transport, all for the embedded case only:
- Processes starting together on a fresh file race to create the tables and the queue rows;
  kombu lets the loser die (``table … already exists``, ``UNIQUE constraint failed:
  kombu_queue.name``: a worker started beside web and beat crashed on it). The loser here
  finds what the winner created.
- The file is looked for before every publish and fetch. A missing file (or folder) is
  recreated with its tables, and the process's pooled connections to the old one are dropped:
  kombu creates the tables only once per process, so without this every process would keep
  failing on "no such table" until restarted.
- Speed (kombu's path delivered about one message a second per worker): the file is in WAL mode
  with ``synchronous=NORMAL`` (a commit survives a killed process, not a power cut; the outbox
  sends again what a power cut loses); queue ids are kept; a partial index holds each queue's
  waiting rows in delivery order; an idle queue is peeked at without the write lock; and the
  transport's loop takes the next message as soon as a task's acknowledgement frees the
  worker's slot, backing off from 2 ms to ``polling_interval`` only while the queue is empty.
- Fetched rows are kept (``visible = 0``); ``prune_delivered`` deletes the old ones (beat runs
  it hourly) so the file does not grow forever.

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
from json import dumps, loads
from pathlib import Path
from queue import Empty
from time import monotonic, sleep
from typing import Any
from urllib.parse import urlsplit

from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.transport import sqlalchemy as kombu_sql
from kombu.transport.sqlalchemy.models import metadata
from kombu.utils.encoding import bytes_to_str
from sqlalchemy import event as sqlalchemy_event
from sqlalchemy import text
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


class QoS(virtual.QoS):
    """kombu's QoS, telling the transport's loop the moment a slot frees (a task acknowledged
    or rejected), so the next message is taken then and not after a sleep."""

    def ack(self, delivery_tag: Any) -> None:
        super().ack(delivery_tag)
        _slot_freed(self.channel)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        super().reject(delivery_tag, requeue=requeue)
        _slot_freed(self.channel)


def _slot_freed(channel: Any) -> None:
    freed = getattr(channel.connection, "slot_freed", None)
    if freed is not None:
        freed.set()


class Channel(kombu_sql.Channel):
    """kombu's SQL channel, recreating the SQLite file when it has gone, and taking a message
    with two statements on a kept queue id (kombu's ORM path costs a queue look-up, a SELECT
    and a versioned UPDATE per message)."""

    QoS = QoS
    # Queue name -> row id in kombu_queue, for this channel's file; dropped when the file is
    # recreated.
    _queue_ids: dict[str, int]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._queue_ids = {}
        super().__init__(*args, **kwargs)

    def _path(self) -> Path:
        # A channel always belongs to a transport, and a transport to a connection.
        assert self.connection is not None and self.connection.client is not None
        return database_path(str(self.connection.client.hostname))

    def _engine_from_config(self) -> Any:
        engine = super()._engine_from_config()
        sqlalchemy_event.listen(engine, "connect", _tune_connection)
        return engine

    def _open(self) -> Any:
        # SQLite creates a missing file, not a missing folder.
        self._path().parent.mkdir(parents=True, exist_ok=True)
        try:
            opened = super()._open()
        except OperationalError:
            # Another process created the tables between kombu's check and its CREATE; kombu
            # caches the engine only after creating them, so this try starts clean.
            opened = super()._open()
        _create_waiting_index(opened[0])
        return opened

    def _get_or_create(self, queue: str) -> Any:
        try:
            return super()._get_or_create(queue)  # type: ignore[misc]  # kombu's, unstubbed
        except IntegrityError:
            # Another process inserted the queue between kombu's look-up and its insert.
            self.session.rollback()
            return super()._get_or_create(queue)  # type: ignore[misc]  # kombu's, unstubbed

    def _queue_id(self, queue: str) -> int:
        found = self._queue_ids.get(queue)
        if found is None:
            found = int(self._get_or_create(queue).id)
            self._queue_ids[queue] = found
        return found

    def _ensure_file(self) -> None:
        path = self._path()
        if path.exists():
            return
        with _recreate_lock:
            self._queue_ids.clear()
            if path.exists():
                return
            engine, _session_cls = self._open()
            # Pooled connections still point at the old file (or at nothing).
            if self._session is not None:
                self._session.close()
            engine.dispose()
            metadata.create_all(engine)
            _create_waiting_index(engine)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        self._ensure_file()
        super()._new_queue(queue, **kwargs)

    # kombu's own signature; its type stubs name the second argument differently.
    def _put(self, queue: str, payload: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self._ensure_file()
        session = self.session
        try:
            # As kombu's model writes it: visible, no timestamp until delivered, version 1.
            session.execute(_INSERT, {"queue_id": self._queue_id(queue), "payload": dumps(payload)})
            session.commit()
        except OperationalError:
            # The publish fails (and can be retried) instead of reporting a message that was
            # never stored.
            session.rollback()
            raise

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        self._ensure_file()
        queue_id = self._queue_id(queue)
        session = self.session
        # A plain read first: an empty queue costs no write lock (WAL readers never block the
        # writers), so idle workers polling do not stand in the way of publishes.
        waiting = session.execute(_PEEK, {"queue_id": queue_id}).first()
        session.commit()
        if waiting is None:
            raise Empty()
        # Taking a message is one statement in one write transaction: the oldest waiting row
        # is hidden and returned under the file's write lock, so two workers never take the
        # same one and a reader never sees a message whose writer has not committed.
        session.execute(text("BEGIN IMMEDIATE TRANSACTION"))
        try:
            # kombu's local stamp of the delivery, which prune_delivered reads.
            now = datetime.datetime.now()  # noqa: DTZ005
            row = session.execute(_TAKE, {"queue_id": queue_id, "now": now}).first()
        finally:
            session.commit()
        if row is None:
            raise Empty()
        return loads(bytes_to_str(row.payload))


# One index for the waiting rows of a queue in delivery order: kombu's own indexes (visible;
# timestamp, id) make a fetch scan every delivered row kept until pruning.
WAITING_INDEX = (
    "CREATE INDEX IF NOT EXISTS ix_kombu_message_waiting "
    "ON kombu_message (queue_id, timestamp, id) WHERE visible = 1"
)
_INSERT = text(
    "INSERT INTO kombu_message (visible, timestamp, payload, version, queue_id) "
    "VALUES (1, NULL, :payload, 1, :queue_id)"
)
_PEEK = text("SELECT 1 FROM kombu_message WHERE queue_id = :queue_id AND visible = 1 LIMIT 1")
# The oldest waiting message of a queue, hidden and returned by one statement.
_TAKE = text(
    "UPDATE kombu_message SET visible = 0, timestamp = :now, version = version + 1 "
    "WHERE id = (SELECT id FROM kombu_message WHERE queue_id = :queue_id AND visible = 1 "
    "ORDER BY timestamp, id LIMIT 1) RETURNING payload"
)


def _tune_connection(dbapi_connection: Any, _record: Any) -> None:
    """Every connection to the broker file: WAL (a reader never waits for a writer, a commit is
    one append to the log) with ``synchronous=NORMAL`` (no fsync per commit: a commit survives
    a killed process, not a power cut, whose losses the outbox sends again)."""
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


def _create_waiting_index(engine: Any) -> None:
    with engine.begin() as connection:
        connection.execute(text(WAITING_INDEX))


class Transport(kombu_sql.Transport):
    Channel = Channel
    # Seconds between polls of an idle queue, at most (kombu's default): after a message, the
    # next poll is immediate, then the wait doubles from MIN_POLL_SECONDS up to this.
    polling_interval = 1.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Set when a task's message is acknowledged or rejected (by the worker's result
        # thread): the loop waiting for a free slot wakes at once.
        self.slot_freed = threading.Event()

    def drain_events(self, connection: Any, timeout: float | None = None) -> None:  # type: ignore[override]  # kombu's virtual signature
        """kombu's loop with an adaptive wait: a busy queue is read again at once and an idle
        one backs off to ``polling_interval``; kombu waits the full interval after every
        empty poll, including the one made while the worker's only slot is busy, which held
        one worker to about one message a second."""
        assert self.cycle is not None and self.channels is not None  # set by __init__
        started = monotonic()
        wait = MIN_POLL_SECONDS
        while True:
            try:
                self.cycle.get(self._deliver, timeout=timeout)
                return
            except Empty:
                elapsed = monotonic() - started
                if timeout is not None and elapsed >= timeout:
                    raise TimeoutError() from None
                busy = not any(channel.qos.can_consume() for channel in self.channels)
                if busy:
                    # Every slot is busy: nothing was read; the next poll is due the moment
                    # a task ends, not after a backoff.
                    pause = BUSY_WAIT_SECONDS
                else:
                    pause = min(wait, self.polling_interval or MIN_POLL_SECONDS)
                    wait *= 2
                if timeout is not None:
                    pause = min(pause, timeout - elapsed)
                if busy:
                    self.slot_freed.wait(pause)
                    self.slot_freed.clear()
                else:
                    sleep(pause)


# The first wait after an empty poll; it doubles up to the transport's polling_interval.
MIN_POLL_SECONDS = 0.002
# The longest wait for a free slot between checks (a slot freed by the loop's own thread
# sets no event it could be waiting on).
BUSY_WAIT_SECONDS = 0.05


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
