"""Ledger write rates in interleaved rounds: this tree, another tree, the reference, the floor.

Each round runs every side once, in a rotating order, each side in its own process and a fresh
copy of its own database, so all sides see the same moments of a shared machine. Figures are
the median over rounds with the spread (min-max); on a busy machine the spread is the noise.

Sides (``--sides``):
- ``after``:   this tree's ``receipts_app.ledger`` (Django), on SQLite or PostgreSQL;
- ``before``:  the same ledger API of another checkout (``--before-tree``, e.g. a
               ``git worktree add /tmp/before <commit>``);
- ``reference``: PyPI opensquilla 0.3.0 ``SessionStorage`` (aiosqlite). It has no PostgreSQL
               backend, so with ``--backend postgres`` it still writes its own SQLite file
               (``synchronous`` as ``--sqlite-sync``): the issue's "ours on PostgreSQL against
               the reference", at the reference's own default durability;
- ``raw``:     the floor under ``after``: the very statements the ledger runs
               (``receipts_app.ledger.fastsql``: on SQLite the prior-status read, the
               ``INSERT … ON CONFLICT … RETURNING`` / ``UPDATE … RETURNING`` and the audit insert
               when the status moved, in one ``BEGIN IMMEDIATE`` … ``COMMIT``; on PostgreSQL the
               one prepared statement with its audit CTE), on the raw driver (sqlite3 / psycopg,
               prepared), one commit per write, every parameter built before the clock starts.
               Same schema, same pages written, no Python between the statements but the loop.
- ``fsync``:   the disk's own limit, measured in the same rotation: ``os.pwrite`` of one 4 KiB
               page then ``os.fdatasync``, ``--fsync-count`` times, on the file system of the
               databases (PostgreSQL's data directory shares it here). A durable commit costs at
               least one of these, so ``1 / median`` is the most commits per second the disk allows.

Operations: N distinct upserts, N conflicting re-upserts (status change), N status updates.
Each side reports writes per second and the CPU time of its own process per write
(``time.process_time``: every thread; SQLite runs inside it, PostgreSQL's server does not, so
on PostgreSQL it is the client's share only).
Durability: SQLite ``synchronous`` is set per run (``--sqlite-sync``: FULL = the reference's
default and ours; OFF = no sync at all, where the disk no longer hides the CPU) on every side's
own connection and read back from it; PostgreSQL commits with ``synchronous_commit`` as
``--pg-sync`` (on by default).

    .venv/bin/python bench/write_rounds.py --backend sqlite --rounds 3 --n 2000 \\
        --sides fsync,reference,after,raw [--before-tree /tmp/osq15-before] [--sqlite-sync FULL]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import workload as wl  # noqa: E402

OPS = ("upsert_distinct", "upsert_conflict", "status_update")
ROOT = HERE.parent
PG_SERVER = os.environ.get("BENCH_PG_SERVER", "postgres://postgres@127.0.0.1:5432")


def rows(n: int) -> list[dict]:
    return [wl.receipt_row("upsert", i) for i in range(n)]


def conflict_row(i: int, n: int) -> dict:
    row = wl.receipt_row("upsert", i % n)
    row.update(
        receipt_id=wl._uuid_for("rid-conflict", i),
        status="repair_failed",
        reason="replayed",
        attempt_count=row["attempt_count"] + 1,
    )
    return row


def write_calls() -> tuple[int, int]:
    """This process's write system calls and bytes so far (all threads; /proc/self/io)."""
    try:
        fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    except OSError:
        return 0, 0
    return int(fields["syscw"]), int(fields["wchar"])


def _figures(samples: list[float], wall: float, cpu: float, writes: tuple[int, int]) -> dict:
    samples.sort()
    n = len(samples)
    return {
        "ops_per_s": round(n / wall, 1),
        "p50_ms": round(samples[n // 2] * 1000, 4),
        # CPU time of this whole process (all threads) per write, in microseconds.
        "cpu_us": round(cpu / n * 1e6, 2),
        # Write system calls and KiB per write: on SQLite, the WAL pages each commit appends
        # (one pwrite per 4 KiB page); on PostgreSQL, the client's socket writes only.
        "write_calls": round(writes[0] / n, 2),
        "write_kib": round(writes[1] / n / 1024, 2),
    }


def timed(fn, items) -> dict:
    samples = []
    w0 = write_calls()
    c0, t0 = time.process_time(), time.perf_counter()
    for item in items:
        s = time.perf_counter()
        fn(item)
        samples.append(time.perf_counter() - s)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    w1 = write_calls()
    return _figures(samples, wall, cpu, (w1[0] - w0[0], w1[1] - w0[1]))


def _sync_probe(folder: Path, count: int, pages: int) -> dict:
    """``pages`` 4 KiB pages rewritten in place, then ``fdatasync``, ``count`` times."""
    path = folder / f"fsync_probe_{os.getpid()}.bin"
    block = os.urandom(4096 * pages)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, block, 0)
        os.fsync(fd)  # the file's size and inode are on disk: what follows is the data sync
        samples = []
        for _ in range(count):
            s = time.perf_counter()
            os.pwrite(fd, block, 0)
            os.fdatasync(fd)
            samples.append(time.perf_counter() - s)
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    samples.sort()
    median = statistics.median(samples)
    return {
        "count": count,
        "pages": pages,
        "median_ms": round(median * 1000, 4),
        "p10_ms": round(samples[count // 10] * 1000, 4),
        "p90_ms": round(samples[(count * 9) // 10] * 1000, 4),
        "syncs_per_s": round(1 / median, 1),
    }


def fsync_floor(folder: Path, count: int, commit_pages: int) -> dict:
    """The disk's commit floor: one page synced (the least a durable commit costs), and a
    commit-sized write synced (as many pages as one of our commits appends to the WAL)."""
    one = _sync_probe(folder, count, 1)
    one["commit_sized"] = _sync_probe(folder, max(count // 5, 20), commit_pages)
    return one


# --- children: one side, one round ----------------------------------------------------------


def child_django(tree: Path, url: str, n: int, sqlite_sync: str) -> dict:
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    os.environ.update(DJANGO_SETTINGS_MODULE="opensquilla_site.settings", DATABASE_URL=url)
    import django

    django.setup()
    from django.db import connection

    from receipts_app import ledger
    from receipts_app.models import MemoryDurableReceipt

    if connection.vendor == "sqlite" and sqlite_sync == "OFF":
        # Settings refuse OFF (a product must not run so); the benchmark sets it on the one
        # kept connection every write below uses, and reads it back from that connection.
        connection.ensure_connection()
        connection.connection.execute("PRAGMA synchronous=OFF")
    # The caller builds the receipt (an API request's validation does); the clock times the
    # ledger call, as the raw side times only its statements.
    distinct = [MemoryDurableReceipt(**r) for r in rows(n)]
    conflicts = [MemoryDurableReceipt(**conflict_row(i, n)) for i in range(n)]
    out = {
        "upsert_distinct": timed(ledger.upsert_memory_durable_receipt, distinct),
        "upsert_conflict": timed(ledger.upsert_memory_durable_receipt, conflicts),
        "status_update": timed(
            lambda rid: ledger.update_memory_durable_receipt(
                rid, status="repair_pending", reason="requeued by bench", attempt_count=0
            ),
            [wl._uuid_for("rid-upsert", i) for i in range(n)],
        ),
    }
    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("PRAGMA synchronous")
            out["durability"] = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[cur.fetchone()[0]]
        else:
            cur.execute("SHOW synchronous_commit")
            out["durability"] = f"synchronous_commit={cur.fetchone()[0]}"
    return out


def child_reference(path: str, n: int, sqlite_sync: str) -> dict:
    import asyncio

    from opensquilla.session.models import MemoryDurableReceipt
    from opensquilla.session.storage import SessionStorage

    async def go() -> dict:
        storage = await SessionStorage.open(path)
        # The reference sets no synchronous level (SQLite's default, FULL); the run's level is
        # set on its own connection, where it applies (the pragma is per connection).
        await storage.conn.execute(f"PRAGMA synchronous={sqlite_sync}")
        distinct = [MemoryDurableReceipt(**r) for r in rows(n)]
        conflicts = [MemoryDurableReceipt(**conflict_row(i, n)) for i in range(n)]
        try:

            async def run(fn, items) -> dict:
                samples = []
                w0 = write_calls()
                c0, t0 = time.process_time(), time.perf_counter()
                for item in items:
                    s = time.perf_counter()
                    await fn(item)
                    samples.append(time.perf_counter() - s)
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                w1 = write_calls()
                return _figures(samples, wall, cpu, (w1[0] - w0[0], w1[1] - w0[1]))

            out = {
                "upsert_distinct": await run(storage.upsert_memory_durable_receipt, distinct),
                "upsert_conflict": await run(storage.upsert_memory_durable_receipt, conflicts),
                "status_update": await run(
                    lambda rid: storage.update_memory_durable_receipt(
                        rid, status="repair_pending", reason="requeued by bench", attempt_count=0
                    ),
                    [wl._uuid_for("rid-upsert", i) for i in range(n)],
                ),
            }
            async with storage.conn.execute("PRAGMA synchronous") as cur:
                level = (await cur.fetchone())[0]
            out["durability"] = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[level]
            return out
        finally:
            await storage.close()

    return asyncio.run(go())


def child_raw(tree: Path, url: str, n: int, sqlite_sync: str) -> dict:
    """The ledger's own statements on the raw driver, one commit per write: the floor."""
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    # Django only builds the statements and their parameters (outside the clock); the writes
    # go through a separate raw connection.
    os.environ.update(DJANGO_SETTINGS_MODULE="opensquilla_site.settings", DATABASE_URL=url)
    import django

    django.setup()
    from receipts_app.audit import current_actor
    from receipts_app.ledger import _prepare_for_write, fastsql
    from receipts_app.models import MemoryDurableReceipt

    who = current_actor()
    actor = [who.name[:150], who.surface]
    stamp = wl.BASE_MS
    update_fields = ("status", "reason", "attempt_count", "updated_at")
    status_at = fastsql.READ_COLUMNS.index("status")

    # Each write's statement parameters come from the ledger's own builders (fastsql), so the
    # bench follows the statements as they change.
    def upsert_params(r: dict) -> dict:
        return _prepare_for_write(MemoryDurableReceipt(**r), stamp)

    distinct = [upsert_params(r) for r in rows(n)]
    conflicts = [upsert_params(conflict_row(i, n)) for i in range(n)]
    update_values = ["repair_pending", "requeued by bench", 0, stamp]
    rids = [wl._uuid_for("rid-upsert", i) for i in range(n)]

    if url.startswith("sqlite:///"):
        import sqlite3

        con = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        # What Django's connection and our settings set on every connection.
        con.execute("PRAGMA foreign_keys = ON")
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(f"PRAGMA synchronous={sqlite_sync}")
        prior_sql = fastsql._SQLITE_PRIOR_BY_KEY.replace("%s", "?")
        upsert_sql = fastsql._SQLITE_UPSERT.replace("%s", "?")
        event_sql = fastsql._EVENT_INSERT.replace("%s", "?")
        update_sql = fastsql._update_sql(update_fields, "sqlite", True).replace("%s", "?")
        prior_by_id = fastsql._SQLITE_PRIOR_BY_ID.replace("%s", "?")
        execute = con.execute
        sqlite_params = [(fastsql.write_values(v), fastsql.prior_key(v)) for v in distinct]
        sqlite_conflicts = [(fastsql.write_values(v), fastsql.prior_key(v)) for v in conflicts]

        def upsert(item: tuple[list, list]) -> None:
            params, key = item
            execute("BEGIN IMMEDIATE")
            prior = execute(prior_sql, key).fetchone()
            row = execute(upsert_sql, params).fetchone()
            if prior is not None and prior[0] != row[status_at]:
                execute(
                    event_sql,
                    fastsql.event_params(row, prior[0], stamp, actor, fastsql._UPSERT_DETAILS),
                )
            execute("COMMIT")

        def update(rid: str) -> None:
            execute("BEGIN IMMEDIATE")
            prior = execute(prior_by_id, (rid,)).fetchone()
            row = execute(update_sql, [*update_values, rid]).fetchone()
            if prior[0] != row[status_at]:
                execute(
                    event_sql,
                    fastsql.event_params(row, prior[0], stamp, actor, fastsql._UPDATE_DETAILS),
                )
            execute("COMMIT")

        distinct_items: list = sqlite_params
        conflict_items: list = sqlite_conflicts
        durability = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
            con.execute("PRAGMA synchronous").fetchone()[0]
        ]
    else:
        import psycopg

        con = psycopg.connect(url, autocommit=True)
        pg_upsert = fastsql._PG_UPSERT
        pg_update = fastsql._update_sql(update_fields, "postgresql", True)

        def upsert(params: list) -> None:
            con.execute(pg_upsert, params, prepare=True).fetchone()

        def update(rid: str) -> None:
            con.execute(
                pg_update,
                fastsql.pg_update_params(rid, update_values, stamp, actor, audited=True),
                prepare=True,
            ).fetchone()

        distinct_items = [fastsql.pg_upsert_params(v, stamp, actor) for v in distinct]
        conflict_items = [fastsql.pg_upsert_params(v, stamp, actor) for v in conflicts]
        durability = "synchronous_commit=" + con.execute("SHOW synchronous_commit").fetchone()[0]
    out = {
        "upsert_distinct": timed(upsert, distinct_items),
        "upsert_conflict": timed(upsert, conflict_items),
        "status_update": timed(update, rids),
        "durability": durability,
    }
    con.close()
    return out


# --- the parent: templates, copies, rounds --------------------------------------------------


def _migrate(tree: Path, url: str, env: dict) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=tree,
        env={**env, "DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "opensquilla_site.settings"},
        check=True,
    )


def _pg(sql: str) -> None:
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as conn:
        conn.execute(sql)


class Databases:
    """One migrated template per tree; every run gets a fresh copy of it."""

    def __init__(self, backend: str, prefix: str, env: dict) -> None:
        self.backend, self.prefix, self.env = backend, prefix, env
        self.dir = wl.RESULTS_DIR / "write_rounds"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.templates: dict[str, str] = {}

    def template(self, side: str, tree: Path) -> str:
        if side in self.templates:
            return self.templates[side]
        name = f"{self.prefix}_tpl_{side}"
        if self.backend == "sqlite":
            path = self.dir / f"{name}.sqlite3"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            _migrate(tree, f"sqlite:///{path}", self.env)
            import sqlite3

            con = sqlite3.connect(path)
            con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            con.close()
            self.templates[side] = str(path)
        else:
            _pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            _pg(f'CREATE DATABASE "{name}"')
            _migrate(tree, f"{PG_SERVER}/{name}", self.env)
            self.templates[side] = name
        return self.templates[side]

    def copy(self, side: str, tree: Path) -> str:
        source = self.template(side, tree)
        name = f"{self.prefix}_run_{side}"
        if self.backend == "sqlite":
            path = self.dir / f"{name}.sqlite3"
            for suffix in ("", "-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)
            shutil.copyfile(source, path)
            return f"sqlite:///{path}"
        _pg(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        _pg(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
        return f"{PG_SERVER}/{name}"


def run_side(side: str, args, dbs: Databases) -> dict:
    if side == "fsync":
        floor = fsync_floor(dbs.dir, args.fsync_count, args.commit_pages)
        return {"fsync": floor, "durability": "fdatasync"}
    env = dict(dbs.env)
    if side == "reference":
        path = dbs.dir / f"{dbs.prefix}_run_reference.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        cmd = [str(wl.RESULTS_DIR / "ref-venv" / "bin" / "python"), __file__, "--child", side]
        cmd += ["--url", str(path)]
    else:
        tree = Path(args.before_tree) if side == "before" else ROOT
        schema_side = "after" if side == "raw" else side
        url = dbs.copy(schema_side, ROOT if side == "raw" else tree)
        cmd = [sys.executable, __file__, "--child", side, "--url", url, "--tree", str(tree)]
    cmd += ["--n", str(args.n), "--sqlite-sync", args.sqlite_sync]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spread(values: list[float], nd: int = 2) -> dict:
    return {
        "median": round(statistics.median(values), nd),
        "min": round(min(values), nd),
        "max": round(max(values), nd),
        "rounds": [round(v, nd) for v in values],
    }


def summarise(per_side: dict[str, list[dict]]) -> tuple[dict, dict]:
    """Per side and operation: rate and CPU per write (median, spread); and per pair of sides,
    the ratio within each round (both sides of a round saw the same moments of the machine),
    then the median and spread of those ratios."""
    summary: dict = {}
    for side, runs in per_side.items():
        if side == "fsync":
            summary[side] = {
                "median_ms": _spread([r["fsync"]["median_ms"] for r in runs], 4),
                "syncs_per_s": _spread([r["fsync"]["syncs_per_s"] for r in runs], 1),
                "p10_ms": [r["fsync"]["p10_ms"] for r in runs],
                "p90_ms": [r["fsync"]["p90_ms"] for r in runs],
                "count": runs[0]["fsync"]["count"],
            }
            if "commit_sized" in runs[0]["fsync"]:
                sized = [r["fsync"]["commit_sized"] for r in runs]
                summary[side]["commit_sized"] = {
                    "pages": sized[0]["pages"],
                    "count": sized[0]["count"],
                    "median_ms": _spread([c["median_ms"] for c in sized], 4),
                    "syncs_per_s": _spread([c["syncs_per_s"] for c in sized], 1),
                }
            continue
        summary[side] = {}
        for op in OPS:
            rates = [r[op]["ops_per_s"] for r in runs]
            summary[side][op] = {
                "ops_per_s_median": round(statistics.median(rates), 1),
                "ops_per_s_min": min(rates),
                "ops_per_s_max": max(rates),
                "p50_ms_median": round(statistics.median([r[op]["p50_ms"] for r in runs]), 4),
                "cpu_us": _spread([r[op]["cpu_us"] for r in runs], 2),
                "write_calls": _spread([r[op]["write_calls"] for r in runs], 2),
                "write_kib": _spread([r[op]["write_kib"] for r in runs], 2),
                "rounds": rates,
            }
    ratios: dict = {}
    writers = [s for s in per_side if s != "fsync"]
    for a in writers:
        for b in writers:
            if a == b:
                continue
            pair = ratios.setdefault(f"{a}/{b}", {})
            for op in OPS:
                pair[op] = {
                    "rate": _spread(
                        [
                            ra[op]["ops_per_s"] / rb[op]["ops_per_s"]
                            for ra, rb in zip(per_side[a], per_side[b], strict=True)
                        ]
                    ),
                    "cpu": _spread(
                        [
                            ra[op]["cpu_us"] / rb[op]["cpu_us"]
                            for ra, rb in zip(per_side[a], per_side[b], strict=True)
                        ]
                    ),
                }
    if "fsync" in per_side:
        floors = {"fsync": lambda f: f["syncs_per_s"]}
        if "commit_sized" in per_side["fsync"][0]["fsync"]:
            floors["fsync_commit"] = lambda f: f["commit_sized"]["syncs_per_s"]
        for floor, rate_of in floors.items():
            for side in writers:
                pair = ratios.setdefault(f"{side}/{floor}", {})
                for op in OPS:
                    pair[op] = {
                        "rate": _spread(
                            [
                                r[op]["ops_per_s"] / rate_of(f["fsync"])
                                for r, f in zip(per_side[side], per_side["fsync"], strict=True)
                            ]
                        )
                    }
    return summary, ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--sides", default="fsync,reference,after,raw")
    parser.add_argument("--before-tree", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=2000, help="operations of each kind per run")
    parser.add_argument("--sqlite-sync", default="FULL", choices=("FULL", "NORMAL", "OFF"))
    parser.add_argument("--pg-sync", default="on", choices=("on", "off"))
    parser.add_argument("--fsync-count", type=int, default=500, help="fdatasync calls per round")
    parser.add_argument(
        "--commit-pages",
        type=int,
        default=20,
        help="pages of the commit-sized sync probe (about what one ledger write appends)",
    )
    parser.add_argument("--name", default=None, help="result file name (var/bench/<name>.json)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        if args.child == "reference":
            result = child_reference(args.url, args.n, args.sqlite_sync)
        elif args.child == "raw":
            result = child_raw(Path(args.tree), args.url, args.n, args.sqlite_sync)
        else:
            result = child_django(Path(args.tree), args.url, args.n, args.sqlite_sync)
        print(json.dumps(result))
        return

    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if "before" in sides and not args.before_tree:
        parser.error("--sides before needs --before-tree")
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    # This tree's setting; OFF is not a product setting, so the children set it themselves.
    env["OPENSQUILLA_SQLITE_SYNCHRONOUS"] = (
        "FULL" if args.sqlite_sync == "OFF" else args.sqlite_sync
    )
    env.setdefault("DATABASE_CONN_MAX_AGE", "600")
    if args.backend == "postgres":
        env["PGOPTIONS"] = (
            f"{env.get('PGOPTIONS', '')} -c synchronous_commit={args.pg_sync}".strip()
        )
    dbs = Databases(args.backend, f"wr_{os.getpid()}", env)
    per_side: dict[str, list[dict]] = {s: [] for s in sides}
    durability: dict[str, str] = {}
    loads: list[float] = []
    started = time.time()
    for round_no in range(args.rounds):
        order = sides[round_no % len(sides) :] + sides[: round_no % len(sides)]
        for side in order:
            result = run_side(side, args, dbs)
            durability[side] = result.pop("durability")
            per_side[side].append(result)
            if side == "fsync":
                f = result["fsync"]
                figures = f"fdatasync median {f['median_ms']:.3f} ms = {f['syncs_per_s']:.0f}/s"
            else:
                figures = " ".join(
                    f"{op} {result[op]['ops_per_s']:>7.0f}/s {result[op]['cpu_us']:>6.0f}us"
                    for op in OPS
                )
            print(f"round {round_no + 1} {side:10s} {figures}", flush=True)
        loads.append(round(os.getloadavg()[0], 2))
    summary, ratios = summarise(per_side)
    print(f"\nmedian over {args.rounds} rounds [min-max], {args.backend}:")
    for side in sides:
        if side == "fsync":
            f = summary[side]["median_ms"]
            print(f"  fsync      fdatasync {f['median']} ms [{f['min']}-{f['max']}]")
            continue
        cells = [
            f"{op} {summary[side][op]['ops_per_s_median']:>7.0f} "
            f"[{summary[side][op]['ops_per_s_min']:.0f}-{summary[side][op]['ops_per_s_max']:.0f}]"
            f" cpu {summary[side][op]['cpu_us']['median']:.0f}us"
            for op in OPS
        ]
        print(f"  {side:10s} ({durability[side]}) " + "  ".join(cells))
    for pair in ("after/raw", "reference/raw", "after/reference", "after/before", "raw/fsync"):
        if pair in ratios:
            cells = {
                op: f"rate {r['rate']['median']} [{r['rate']['min']}-{r['rate']['max']}]"
                + (f" cpu {r['cpu']['median']}" if "cpu" in r else "")
                for op, r in ratios[pair].items()
            }
            print(f"  {pair}: {cells}")
    result = {
        "kind": "write_rounds",
        "backend": args.backend,
        "sides": sides,
        "rounds": args.rounds,
        "n": args.n,
        "sqlite_sync": args.sqlite_sync,
        "pg_sync": args.pg_sync if args.backend == "postgres" else None,
        "durability": durability,
        "before_tree": args.before_tree,
        "summary": summary,
        "ratios": ratios,
        "loadavg_per_round": loads,
        "elapsed_s": round(time.time() - started, 1),
        "machine": wl.machine_info(),
        "command": " ".join(["bench/write_rounds.py", *sys.argv[1:]]),
    }
    path = wl.write_result(args.name or f"write_rounds_{args.backend}", result)
    print(f"wrote {path}")
    if args.backend == "postgres":
        for side in ("after", "before", "raw"):
            for kind in ("tpl", "run"):
                _pg(f'DROP DATABASE IF EXISTS "{dbs.prefix}_{kind}_{side}" WITH (FORCE)')


if __name__ == "__main__":
    main()
