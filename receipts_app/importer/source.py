"""Reading an OpenSquilla ``sessions.db``: open read-only, check the schema, yield typed rows.

Upstream's SQLite is dynamically typed, so every value is checked here; a row that would
store garbage (a text timestamp, a NUL that PostgreSQL cannot hold, tool calls that are not
JSON) stops the import with the row named, before anything is committed.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..receipt_ids import addressable_receipt_id
from .errors import ImportSourceError
from .schema import SchemaVersion, read_schema_version

SQLITE_MAGIC = b"SQLite format 3\x00"
CHUNK = 500

# ``seen(natural key, updated_at)``: the caller already holds this row at this stamp.
SeenStamp = Callable[[Any, Any], bool]

# Columns every supported release (0.3.0 and later) has. Anything else is optional and read
# as NULL when absent: the coverage columns, for one, were added by a later migration.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": ("session_key", "session_id", "created_at", "updated_at"),
    "transcript_entries": ("id", "session_id", "session_key", "role", "created_at"),
    "memory_durable_receipts": (
        "receipt_id",
        "session_key",
        "session_id",
        "scope",
        "idempotency_key",
        "status",
        "created_at",
        "updated_at",
    ),
}
OPTIONAL_COLUMNS: dict[str, tuple[str, ...]] = {
    "sessions": ("agent_id", "epoch"),
    "transcript_entries": (
        "message_id",
        "content",
        "tool_calls",
        "tool_call_id",
        "reasoning_content",
        "token_count",
    ),
    "memory_durable_receipts": (
        "turn_id",
        "source_path",
        "target_path",
        "content_hash",
        "coverage_turn_id",
        "coverage_hash",
        "coverage_entry_count",
        "reason",
        "attempt_count",
        "next_retry_at_ms",
        "schema_version",
    ),
}
COVERAGE_COLUMNS = ("coverage_turn_id", "coverage_hash", "coverage_entry_count")
# Each row's SQLite rowid, read beside its columns so a report can name the source row.
ROWID = "_rowid"


@dataclass(frozen=True)
class SourceSession:
    session_key: str
    session_id: str
    agent_id: str | None
    epoch: int
    created_at: int
    updated_at: int
    rowid: int | None = None  # the source row, named when the row is reported


@dataclass(frozen=True)
class SourceEntry:
    id: int
    session_id: str
    session_key: str
    message_id: str | None
    role: str
    content: str | None
    tool_calls: Any
    tool_call_id: str | None
    reasoning_content: str | None
    token_count: int | None
    created_at: int
    # The row's parts of its session's fingerprint, as read (0 when built by hand): the
    # mirror sums what it applied per session and compares it with the file's fingerprint.
    digest: int = 0
    native: int = 0

    @property
    def rowid(self) -> int:
        return self.id  # INTEGER PRIMARY KEY: the id is the rowid


@dataclass(frozen=True)
class SourceReceipt:
    values: dict[str, Any]
    rowid: int | None = None

    @property
    def receipt_id(self) -> str:
        return self.values["receipt_id"]


# --- transcript fingerprints (docs/MIRROR.md "Messages edited in place") -------------------
# Upstream (after 0.5.3) rewrites a transcript row in place, keeping its id. A session's
# fingerprint has two parts, both summed over its rows so that what the mirror applied can be
# added to what it stored:
# - ``native``: a weighted sum of each row's id and column lengths, computed by SQLite's own
#   functions (a scan at SQLite's speed, ~1 ms per few thousand rows): a changed row count, a
#   deleted row, or an edit that changes any column's length moves it;
# - ``digest``: the XOR of a 63-bit BLAKE2b digest of each row's raw values, computed inside
#   SQLite by an aggregate registered on the connection (a Python call per row, ~10 µs): any
#   edit moves it. The mirror asks for it less often (``sync.STRONG_CHECK_MS``).
DIGEST_COLUMNS = (
    "id",
    "session_key",
    "message_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "reasoning_content",
    "token_count",
    "created_at",
)
# (column, weight) of the native part; id is added as is.
_NATIVE_WEIGHTS = (
    ("session_key", 3),
    ("message_id", 5),
    ("role", 11),
    ("content", 131),
    ("tool_calls", 17),
    ("tool_call_id", 19),
    ("reasoning_content", 23),
    ("token_count", 29),
)
NATIVE = "_native"
# Sessions per tail query: one SELECT each, joined by UNION ALL (SQLite allows 500 per compound).
_TAILS_PER_QUERY = 100
_DIGEST_MASK = (1 << 63) - 1


def entry_digest(*values: Any) -> int:
    """A row's digest over its raw values in ``DIGEST_COLUMNS`` order (types included)."""
    raw = repr(values).encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "big") & _DIGEST_MASK


def native_expression(present: set[str]) -> str:
    """The SQL of one row's native part (columns the file lacks count as empty)."""
    terms = ["id"] + [
        f"COALESCE(LENGTH({column}), 0) * {weight}"
        for column, weight in _NATIVE_WEIGHTS
        if column in present
    ]
    # Lengths weighted by the row's position too, so text moved between rows shows.
    if "content" in present:
        terms.append("COALESCE(LENGTH(content), 0) * (id % 65521)")
    return " + ".join(terms)


class _TranscriptFingerprint:
    """SQLite aggregate: the XOR of the rows' ``entry_digest``."""

    def __init__(self) -> None:
        self.value = 0

    def step(self, *values: Any) -> None:
        self.value ^= entry_digest(*values)

    def finalize(self) -> int:
        return self.value


@dataclass(frozen=True)
class Fingerprint:
    """A session's transcript up to an id: row count, native sum, XOR of digests."""

    count: int = 0
    native: int = 0
    digest: int = 0

    def plus(self, other: Fingerprint) -> Fingerprint:
        return Fingerprint(
            self.count + other.count, self.native + other.native, self.digest ^ other.digest
        )

    def minus(self, other: Fingerprint) -> Fingerprint:
        """What is left of this fingerprint without ``other``'s rows (a part of them)."""
        return Fingerprint(
            self.count - other.count, self.native - other.native, self.digest ^ other.digest
        )

    @classmethod
    def of(cls, entries: Any) -> Fingerprint:
        out = cls()
        for entry in entries:
            out = out.plus(cls(1, entry.native, entry.digest))
        return out


# --- value checks -------------------------------------------------------------------------


def _text(
    value: Any, what: str, *, required: bool = False, max_len: int | None = None
) -> str | None:
    if value is None:
        if required:
            raise ImportSourceError(f"{what} is missing")
        return None
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ImportSourceError(f"{what} is not UTF-8 text") from exc
    text = str(value)
    if "\x00" in text:
        raise ImportSourceError(f"{what} contains a NUL character")
    if required and not text.strip():
        raise ImportSourceError(f"{what} is empty")
    # Our columns are bounded where upstream's TEXT is not; PostgreSQL would refuse the row.
    if max_len is not None and len(text) > max_len:
        raise ImportSourceError(f"{what} is longer than {max_len} characters")
    return text


def _int(value: Any, what: str, *, required: bool = False, default: int | None = None) -> Any:
    if value is None or value == "":
        if required:
            raise ImportSourceError(f"{what} is missing")
        return default
    if isinstance(value, bool):
        raise ImportSourceError(f"{what} must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError as exc:
        raise ImportSourceError(f"{what} must be an integer, got {value!r}") from exc


def _json_text(value: Any, what: str) -> Any:
    text = _text(value, what)
    if text is None or not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ImportSourceError(f"{what} is not valid JSON") from exc


# --- the database -------------------------------------------------------------------------


class SourceDatabase:
    """A validated, read-only OpenSquilla database. Use as a context manager."""

    def __init__(self, path: Path, *, busy_timeout: float = 5.0) -> None:
        self.path = path
        # Rows and queries read, by kind: what a test or a bench counts.
        self.reads: Counter[str] = Counter()
        self._fingerprint_ready = False
        self.conn = _connect(path, busy_timeout)
        try:
            self.columns = _check_schema(self.conn, path)
        except BaseException:
            self.conn.close()
            raise

    def __enter__(self) -> SourceDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    def schema_version(self) -> SchemaVersion:
        try:
            return read_schema_version(self.conn)
        except sqlite3.DatabaseError as exc:
            raise ImportSourceError(f"{self.path} cannot be read: {exc}") from exc

    @property
    def has_coverage_columns(self) -> bool:
        present = self.columns["memory_durable_receipts"]
        return all(c in present for c in COVERAGE_COLUMNS)

    def count(self, table: str) -> int:
        return int(self._run(f"SELECT COUNT(*) FROM {table}").fetchone()[0])  # noqa: S608

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> sqlite3.Cursor:
        try:
            return self.conn.execute(sql, params)
        except sqlite3.DatabaseError as exc:
            raise ImportSourceError(f"{self.path} cannot be read: {exc}") from exc

    def _select(
        self, table: str, order_by: str, where: str = "", params: tuple[Any, ...] = ()
    ) -> Iterator[list[dict[str, Any]]]:
        present = self.columns[table]
        wanted = REQUIRED_COLUMNS[table] + OPTIONAL_COLUMNS[table] + (ROWID,)
        # Table and column names come from the constants above, never from the source file.
        select = ", ".join(c if c in present else f"NULL AS {c}" for c in wanted if c != ROWID) + (
            f", rowid AS {ROWID}" if self._has_rowid(table) else f", NULL AS {ROWID}"
        )
        if table == "transcript_entries":
            # Each row's native fingerprint part, by SQLite itself (see native_expression).
            select += f", {native_expression(present)} AS {NATIVE}"
            wanted = (*wanted, NATIVE)
        condition = f" WHERE {where}" if where else ""
        cursor = self._run(
            f"SELECT {select} FROM {table}{condition} ORDER BY {order_by}",  # noqa: S608
            params,
        )
        while True:
            try:
                batch = cursor.fetchmany(CHUNK)
            except sqlite3.DatabaseError as exc:
                raise ImportSourceError(f"{self.path} cannot be read: {exc}") from exc
            if not batch:
                return
            yield [dict(zip(wanted, row, strict=True)) for row in batch]

    def sessions(self) -> Iterator[list[SourceSession]]:
        for batch in self._select("sessions", "created_at, session_key"):
            yield [_session(row) for row in batch]

    def transcript_entries(self) -> Iterator[list[SourceEntry]]:
        for batch in self._select("transcript_entries", "id"):
            yield [_entry(row) for row in batch]

    def entries_of_session(
        self, session_id: str, through_id: int, after_id: int = 0
    ) -> Iterator[list[SourceEntry]]:
        """One session's entries after ``after_id`` up to ``through_id``: the mirror's re-read
        of an edited one (its newest rows, or all of them)."""
        where = "session_id = ? AND id > ? AND id <= ?"
        params = (session_id, after_id, through_id)
        for batch in self._select("transcript_entries", "id", where, params):
            self.reads["entries_reread"] += len(batch)
            yield [_entry(row) for row in batch]

    def _digest_sql(self, strong: bool) -> str:
        if not strong:
            return "0"
        if not self._fingerprint_ready:
            self.conn.create_aggregate(
                "osq_transcript_fp", len(DIGEST_COLUMNS), _TranscriptFingerprint
            )
            self._fingerprint_ready = True
        present = self.columns["transcript_entries"]
        # Column names come from the constant above, never from the file.
        args = ", ".join(c if c in present else "NULL" for c in DIGEST_COLUMNS)
        return f"osq_transcript_fp({args})"

    def tail_fingerprints(
        self, tails: Mapping[str, int], through_id: int, *, strong: bool = False
    ) -> dict[str, Fingerprint]:
        """Each session's :class:`Fingerprint` over its entries with ``tails[session] < id <=
        through_id``: one range of upstream's index on ``session_id`` (its rowid is ``id``)
        per session, so the cost is the tail's length, not the session's. One query per 100
        sessions; a session without such entries is absent."""
        native = native_expression(self.columns["transcript_entries"])
        digest = self._digest_sql(strong)
        items = list(tails.items())
        out: dict[str, Fingerprint] = {}
        for start in range(0, len(items), _TAILS_PER_QUERY):
            chunk = items[start : start + _TAILS_PER_QUERY]
            one = (
                f"SELECT ?, COUNT(*), SUM({native}), {digest} FROM transcript_entries "  # noqa: S608
                "WHERE session_id = ? AND id > ? AND id <= ?"
            )
            params: list[Any] = []
            for session_id, after_id in chunk:
                params += [session_id, session_id, after_id, through_id]
            cursor = self._run(" UNION ALL ".join([one] * len(chunk)), tuple(params))
            self._count_fingerprint(out, cursor, strong)
        return out

    def tail_start(self, session_id: str, through_id: int, keep: int) -> int | None:
        """The id after which a session's newest ``keep`` entries (up to ``through_id``) lie,
        read backwards along upstream's index; None when it has no more than ``keep``."""
        row = self._run(
            "SELECT id FROM transcript_entries WHERE session_id = ? AND id <= ? "
            "ORDER BY id DESC LIMIT 1 OFFSET ?",
            (session_id, through_id, keep),
        ).fetchone()
        self.reads["tail_start_queries"] += 1
        return None if row is None else int(row[0])

    def _count_fingerprint(
        self, out: dict[str, Fingerprint], cursor: sqlite3.Cursor, strong: bool
    ) -> None:
        try:
            found = cursor.fetchall()
        except sqlite3.DatabaseError as exc:
            raise ImportSourceError(f"{self.path} cannot be read: {exc}") from exc
        self.reads["strong_fingerprint_queries" if strong else "fingerprint_queries"] += 1
        for session_id, count, total, xor in found:
            if not count:
                continue
            self.reads["fingerprint_rows"] += int(count)
            out[str(session_id)] = Fingerprint(int(count), int(total or 0), int(xor or 0))

    def fingerprints(
        self, session_ids: Iterable[str], through_id: int, *, strong: bool = False
    ) -> dict[str, Fingerprint]:
        """Each session's :class:`Fingerprint` over its entries with ``id <= through_id``,
        computed inside SQLite (one aggregate query per ``CHUNK`` sessions, served by
        upstream's index on ``session_id``); ``digest`` only when ``strong`` (0 otherwise).
        A session without entries is absent."""
        native = native_expression(self.columns["transcript_entries"])
        digest = self._digest_sql(strong)
        ids = list(dict.fromkeys(session_ids))
        out: dict[str, Fingerprint] = {}
        for start in range(0, len(ids), CHUNK):
            chunk = ids[start : start + CHUNK]
            marks = ", ".join("?" * len(chunk))
            cursor = self._run(
                f"SELECT session_id, COUNT(*), SUM({native}), {digest} "  # noqa: S608
                f"FROM transcript_entries WHERE session_id IN ({marks}) AND id <= ? "
                "GROUP BY session_id",
                (*chunk, through_id),
            )
            self._count_fingerprint(out, cursor, strong)
        return out

    def receipts(self) -> Iterator[list[SourceReceipt]]:
        # rowid is upstream's insertion-order tie-break (docs/UPSTREAM.md#reads-and-orderings).
        order = "created_at, rowid" if self._has_rowid() else "created_at, receipt_id"
        for batch in self._select("memory_durable_receipts", order):
            yield [_receipt(row) for row in batch]

    # --- incremental reads (the live mirror) ---------------------------------------------
    # Keyset order on (updated_at, natural key): a change commits with a new updated_at, so
    # everything changed since a cursor comes after it. Upstream has no index on updated_at;
    # SQLite sorts once per read, and the reader streams the result in CHUNK-row batches.

    def sessions_after(
        self, updated_at: int, session_key: str, *, seen: SeenStamp | None = None
    ) -> Iterator[list[SourceSession]]:
        """Sessions after the keyset position; ``seen(key, updated_at)`` true drops a row
        before it is converted (the mirror's overlap re-read finds mostly rows it applied)."""
        where = "updated_at > ? OR (updated_at = ? AND session_key > ?)"
        params = (updated_at, updated_at, session_key)
        for batch in self._select("sessions", "updated_at, session_key", where, params):
            yield [_session(row) for row in _unseen(batch, "session_key", seen)]

    def entries_after(self, entry_id: int) -> Iterator[list[SourceEntry]]:
        # AUTOINCREMENT ids: a later commit always has a larger id.
        for batch in self._select("transcript_entries", "id", "id > ?", (entry_id,)):
            self.reads["entries"] += len(batch)
            yield [_entry(row) for row in batch]

    def receipts_after(
        self, updated_at: int, key: str, *, seen: SeenStamp | None = None
    ) -> Iterator[list[SourceReceipt]]:
        """Receipts after the keyset position; ``seen`` as for :meth:`sessions_after`."""
        where = "updated_at > ? OR (updated_at = ? AND idempotency_key > ?)"
        params = (updated_at, updated_at, key)
        order = "updated_at, idempotency_key"
        for batch in self._select("memory_durable_receipts", order, where, params):
            yield [_receipt(row) for row in _unseen(batch, "idempotency_key", seen)]

    def keys(self, table: str) -> set[str]:
        """Every session key (``sessions``) or idempotency key (``memory_durable_receipts``)."""
        column = {"sessions": "session_key", "memory_durable_receipts": "idempotency_key"}[table]
        cursor = self._run(f"SELECT {column} FROM {table}")  # noqa: S608
        try:
            return {str(row[0]) for row in cursor.fetchall()}
        except sqlite3.DatabaseError as exc:
            raise ImportSourceError(f"{self.path} cannot be read: {exc}") from exc

    def max_entry_id(self) -> int:
        return int(self._run("SELECT COALESCE(MAX(id), 0) FROM transcript_entries").fetchone()[0])

    def reread_columns(self) -> None:
        """Read the tables' columns again: a migration changed the file under this connection
        (0.5.5's V044 rebuilds the receipts table without three columns)."""
        self.columns = _check_schema(self.conn, self.path)

    def schema_cookie(self) -> int:
        """SQLite's schema cookie: it moves whenever a migration changes the file's schema."""
        return int(self._run("PRAGMA schema_version").fetchone()[0])

    def data_version(self) -> int:
        """SQLite's per-connection change counter: it moves when another connection commits."""
        return int(self._run("PRAGMA data_version").fetchone()[0])

    def _has_rowid(self, table: str = "memory_durable_receipts") -> bool:
        # Table names come from the constants above, never from the source file.
        try:
            self.conn.execute(f"SELECT rowid FROM {table} LIMIT 1")  # noqa: S608
        except sqlite3.DatabaseError:
            return False
        return True


def _connect(path: Path, busy_timeout: float = 5.0) -> sqlite3.Connection:
    if not path.exists():
        raise ImportSourceError(f"{path} does not exist")
    if not path.is_file():
        raise ImportSourceError(f"{path} is not a file")
    try:
        with path.open("rb") as handle:
            header = handle.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise ImportSourceError(f"{path} cannot be opened: {exc.strerror or exc}") from exc
    if header != SQLITE_MAGIC:
        raise ImportSourceError(f"{path} is not an SQLite database")
    uri = f"file:{path.resolve().as_posix()}?mode=ro"
    try:
        conn = _open(uri, busy_timeout)
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise ImportSourceError(f"{path} is locked by another process: {exc}") from exc
        # A WAL database in a read-only directory cannot create its -shm file. Reading it
        # as immutable is then the only way in; the operator is told to stop writers first.
        try:
            conn = _open(f"{uri}&immutable=1", busy_timeout)
        except sqlite3.DatabaseError as exc:
            raise ImportSourceError(f"{path} is not a readable SQLite database: {exc}") from exc
    except sqlite3.DatabaseError as exc:
        raise ImportSourceError(f"{path} is not a readable SQLite database: {exc}") from exc
    try:
        problems = [row[0] for row in conn.execute("PRAGMA quick_check").fetchall()]
    except sqlite3.DatabaseError as exc:
        conn.close()
        if "locked" in str(exc) or "busy" in str(exc):
            raise ImportSourceError(f"{path} is locked by another process: {exc}") from exc
        raise ImportSourceError(f"{path} is corrupt: {exc}") from exc
    if problems != ["ok"]:
        conn.close()
        raise ImportSourceError(f"{path} is corrupt: {'; '.join(map(str, problems[:3]))}")
    return conn


def _open(uri: str, busy_timeout: float = 5.0) -> sqlite3.Connection:
    # The busy timeout waits out a writer's lock (WAL readers rarely meet one) instead of
    # failing at once; the caller reports a lock that outlasts it and retries later.
    conn = sqlite3.connect(uri, uri=True, timeout=busy_timeout)
    try:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _check_schema(conn: sqlite3.Connection, path: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    missing_tables = []
    for table, required in REQUIRED_COLUMNS.items():
        try:
            columns = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        except sqlite3.DatabaseError as exc:
            raise ImportSourceError(f"{path} cannot be read: {exc}") from exc
        if not columns:
            missing_tables.append(table)
            continue
        absent = [c for c in required if c not in columns]
        if absent:
            raise ImportSourceError(
                f"{path} is not an OpenSquilla sessions database: table {table} lacks "
                f"{', '.join(absent)}"
            )
        found[table] = columns
    if missing_tables:
        raise ImportSourceError(
            f"{path} is not an OpenSquilla sessions database: missing table(s) "
            f"{', '.join(missing_tables)}"
        )
    return found


def _session(row: dict[str, Any]) -> SourceSession:
    key = _text(row["session_key"], "session key", required=True)
    what = f"session {key!r}"
    epoch = _int(row["epoch"], f"{what}: epoch", default=0)
    if epoch < 0:
        raise ImportSourceError(f"{what}: epoch is negative")
    return SourceSession(
        session_key=str(key),
        session_id=str(_text(row["session_id"], f"{what}: session_id", required=True, max_len=64)),
        agent_id=_text(row["agent_id"], f"{what}: agent_id"),
        epoch=epoch,
        created_at=_int(row["created_at"], f"{what}: created_at", required=True),
        updated_at=_int(row["updated_at"], f"{what}: updated_at", required=True),
        rowid=row[ROWID],
    )


def _entry(row: dict[str, Any]) -> SourceEntry:
    entry_id = _int(row["id"], "transcript entry id", required=True)
    what = f"transcript entry {entry_id}"
    if entry_id < 1:
        raise ImportSourceError(f"{what}: id must be positive")
    return SourceEntry(
        id=entry_id,
        session_id=str(_text(row["session_id"], f"{what}: session_id", required=True, max_len=64)),
        session_key=str(_text(row["session_key"], f"{what}: session_key", required=True)),
        message_id=_text(row["message_id"], f"{what}: message_id", max_len=64),
        role=str(_text(row["role"], f"{what}: role", required=True, max_len=16)),
        content=_text(row["content"], f"{what}: content"),
        tool_calls=_json_text(row["tool_calls"], f"{what}: tool_calls"),
        tool_call_id=_text(row["tool_call_id"], f"{what}: tool_call_id"),
        reasoning_content=_text(row["reasoning_content"], f"{what}: reasoning_content"),
        token_count=_int(row["token_count"], f"{what}: token_count"),
        created_at=_int(row["created_at"], f"{what}: created_at", required=True),
        digest=entry_digest(*(row[c] for c in DIGEST_COLUMNS)),
        native=int(row.get(NATIVE) or 0),
    )


_RECEIPT_TEXT_REQUIRED = ("session_key", "session_id", "scope", "idempotency_key", "status")
_RECEIPT_TEXT_OPTIONAL = (
    "turn_id",
    "source_path",
    "target_path",
    "content_hash",
    "coverage_turn_id",
    "coverage_hash",
    "reason",
)


_RECEIPT_MAX_LEN = {"scope": 64, "status": 64, "content_hash": 128, "coverage_hash": 128}


def _unseen(batch: list[dict[str, Any]], key: str, seen: SeenStamp | None) -> list[dict[str, Any]]:
    if seen is None:
        return batch
    return [row for row in batch if not seen(row[key], row["updated_at"])]


def _receipt(row: dict[str, Any]) -> SourceReceipt:
    # An upstream id with "/" could not be addressed by URL: it is stored percent-encoded.
    receipt_id = addressable_receipt_id(
        str(_text(row["receipt_id"], "receipt_id", required=True, max_len=128))
    )
    what = f"receipt {receipt_id}"
    values: dict[str, Any] = {"receipt_id": receipt_id}
    for name in _RECEIPT_TEXT_REQUIRED:
        values[name] = _text(
            row[name], f"{what}: {name}", required=True, max_len=_RECEIPT_MAX_LEN.get(name)
        )
    for name in _RECEIPT_TEXT_OPTIONAL:
        values[name] = _text(row[name], f"{what}: {name}", max_len=_RECEIPT_MAX_LEN.get(name))
    values["coverage_entry_count"] = _int(
        row["coverage_entry_count"], f"{what}: coverage_entry_count"
    )
    values["attempt_count"] = _int(row["attempt_count"], f"{what}: attempt_count", default=0)
    values["next_retry_at_ms"] = _int(row["next_retry_at_ms"], f"{what}: next_retry_at_ms")
    values["created_at"] = _int(row["created_at"], f"{what}: created_at", required=True)
    values["updated_at"] = _int(row["updated_at"], f"{what}: updated_at", required=True)
    values["schema_version"] = _int(row["schema_version"], f"{what}: schema_version", default=1)
    return SourceReceipt(values=values, rowid=row[ROWID])
