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
- ``raw``:     the raw driver (sqlite3 / psycopg, prepared, one commit per call) running the
               bare upsert/update on this tree's schema: the floor any ORM-level code sits on.

Operations: N distinct upserts, N conflicting re-upserts (status change), N status updates.
Durability: SQLite ``synchronous`` is set per run (``--sqlite-sync``, FULL = the reference's
default) for every side, PostgreSQL commits with ``synchronous_commit=on``.

    .venv/bin/python bench/write_rounds.py --backend sqlite --rounds 3 --n 2000 \\
        --sides reference,after,raw [--before-tree /tmp/osq15-before] [--sqlite-sync FULL]
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


def timed(fn, items) -> dict:
    samples = []
    t0 = time.perf_counter()
    for item in items:
        s = time.perf_counter()
        fn(item)
        samples.append(time.perf_counter() - s)
    wall = time.perf_counter() - t0
    samples.sort()
    return {
        "ops_per_s": round(len(samples) / wall, 1),
        "p50_ms": round(samples[len(samples) // 2] * 1000, 4),
    }


# --- children: one side, one round ----------------------------------------------------------


def child_django(tree: Path, url: str, n: int) -> dict:
    sys.path.insert(0, str(tree))
    os.chdir(tree)
    os.environ.update(DJANGO_SETTINGS_MODULE="opensquilla_site.settings", DATABASE_URL=url)
    import django

    django.setup()
    from receipts_app import ledger
    from receipts_app.models import MemoryDurableReceipt

    data = rows(n)
    out = {
        "upsert_distinct": timed(
            lambda r: ledger.upsert_memory_durable_receipt(MemoryDurableReceipt(**r)), data
        ),
        "upsert_conflict": timed(
            lambda r: ledger.upsert_memory_durable_receipt(MemoryDurableReceipt(**r)),
            [conflict_row(i, n) for i in range(n)],
        ),
        "status_update": timed(
            lambda rid: ledger.update_memory_durable_receipt(
                rid, status="repair_pending", reason="requeued by bench", attempt_count=0
            ),
            [wl._uuid_for("rid-upsert", i) for i in range(n)],
        ),
    }
    from django.db import connection

    with connection.cursor() as cur:
        if connection.vendor == "sqlite":
            cur.execute("PRAGMA synchronous")
            out["durability"] = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[cur.fetchone()[0]]
        else:
            cur.execute("SHOW synchronous_commit")
            out["durability"] = f"synchronous_commit={cur.fetchone()[0]}"
    return out


def child_reference(path: str, n: int) -> dict:
    import asyncio

    from opensquilla.session.models import MemoryDurableReceipt
    from opensquilla.session.storage import SessionStorage

    async def go() -> dict:
        storage = await SessionStorage.open(path)
        loop_rows = rows(n)
        try:

            async def run(fn, items) -> dict:
                samples = []
                t0 = time.perf_counter()
                for item in items:
                    s = time.perf_counter()
                    await fn(item)
                    samples.append(time.perf_counter() - s)
                wall = time.perf_counter() - t0
                samples.sort()
                return {
                    "ops_per_s": round(len(samples) / wall, 1),
                    "p50_ms": round(samples[len(samples) // 2] * 1000, 4),
                }

            out = {
                "upsert_distinct": await run(
                    lambda r: storage.upsert_memory_durable_receipt(MemoryDurableReceipt(**r)),
                    loop_rows,
                ),
                "upsert_conflict": await run(
                    lambda r: storage.upsert_memory_durable_receipt(MemoryDurableReceipt(**r)),
                    [conflict_row(i, n) for i in range(n)],
                ),
                "status_update": await run(
                    lambda rid: storage.update_memory_durable_receipt(
                        rid, status="repair_pending", reason="requeued by bench", attempt_count=0
                    ),
                    [wl._uuid_for("rid-upsert", i) for i in range(n)],
                ),
            }
            import sqlite3

            con = sqlite3.connect(path)
            out["durability"] = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[
                con.execute("PRAGMA synchronous").fetchone()[0]
            ]
            con.close()
            return out
        finally:
            await storage.close()

    return asyncio.run(go())


def child_raw(url: str, n: int, sqlite_sync: str) -> dict:
    """The bare statements on our schema: the driver's floor."""
    cols = wl.RECEIPT_COLUMNS + ("agent_id",)
    upd = [c for c in cols if c not in ("receipt_id", "idempotency_key", "created_at")]
    table = "receipts_app_memorydurablereceipt"

    def values(r: dict) -> list:
        return [r[c] for c in wl.RECEIPT_COLUMNS] + [r["session_key"].split(":")[1]]

    if url.startswith("sqlite:///"):
        import sqlite3

        con = sqlite3.connect(url[len("sqlite:///") :], isolation_level=None)
        con.execute("PRAGMA journal_mode=WAL")
        con.execute(f"PRAGMA synchronous={sqlite_sync}")
        mark = "?"

        def run(sql: str, params: list) -> None:
            con.execute("BEGIN IMMEDIATE")
            con.execute(sql, params).fetchone()
            con.execute("COMMIT")

        durability = sqlite_sync
    else:
        import psycopg

        con = psycopg.connect(url, autocommit=True)
        mark = "%s"

        def run(sql: str, params: list) -> None:
            con.execute(sql, params, prepare=True).fetchone()

        durability = "synchronous_commit=" + con.execute("SHOW synchronous_commit").fetchone()[0]
    upsert = (
        f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join([mark] * len(cols))}) "
        "ON CONFLICT (idempotency_key) DO UPDATE SET "
        + ", ".join(f"{c} = excluded.{c}" for c in upd)
        + " RETURNING *"
    )
    update = (
        f"UPDATE {table} SET status = {mark}, reason = {mark}, attempt_count = {mark}, "
        f"updated_at = {mark} WHERE receipt_id = {mark} RETURNING *"
    )
    stamp = wl.BASE_MS
    out = {
        "upsert_distinct": timed(lambda r: run(upsert, values(r)), rows(n)),
        "upsert_conflict": timed(
            lambda r: run(upsert, values(r)), [conflict_row(i, n) for i in range(n)]
        ),
        "status_update": timed(
            lambda rid: run(update, ["repair_pending", "requeued by bench", 0, stamp, rid]),
            [wl._uuid_for("rid-upsert", i) for i in range(n)],
        ),
        "durability": durability,
    }
    con.close()
    return out


# --- the parent: templates, copies, rounds --------------------------------------------------


def _migrate(tree: Path, url: str, env: dict) -> None:
    subprocess.run(
        [str(ROOT / ".venv" / "bin" / "python"), "manage.py", "migrate", "--noinput", "-v", "0"],
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
        cmd = [str(ROOT / ".venv" / "bin" / "python"), __file__, "--child", side, "--url", url]
        cmd += ["--tree", str(tree)]
    cmd += ["--n", str(args.n), "--sqlite-sync", args.sqlite_sync]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{side} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--sides", default="reference,after,raw")
    parser.add_argument("--before-tree", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=2000, help="operations of each kind per run")
    parser.add_argument("--sqlite-sync", default="FULL", choices=("FULL", "NORMAL"))
    parser.add_argument("--name", default=None, help="result file name (var/bench/<name>.json)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--tree", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child:
        if args.child == "reference":
            result = child_reference(args.url, args.n)
        elif args.child == "raw":
            result = child_raw(args.url, args.n, args.sqlite_sync)
        else:
            result = child_django(Path(args.tree), args.url, args.n)
        print(json.dumps(result))
        return

    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if "before" in sides and not args.before_tree:
        parser.error("--sides before needs --before-tree")
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    env["OPENSQUILLA_SQLITE_SYNCHRONOUS"] = args.sqlite_sync  # this tree's setting
    env.setdefault("DATABASE_CONN_MAX_AGE", "600")
    dbs = Databases(args.backend, f"wr_{os.getpid()}", env)
    per_side: dict[str, list[dict]] = {s: [] for s in sides}
    durability: dict[str, str] = {}
    started = time.time()
    for round_no in range(args.rounds):
        order = sides[round_no % len(sides) :] + sides[: round_no % len(sides)]
        for side in order:
            result = run_side(side, args, dbs)
            durability[side] = result.pop("durability")
            per_side[side].append(result)
            figures = " ".join(f"{op} {result[op]['ops_per_s']:>8.0f}/s" for op in OPS)
            print(f"round {round_no + 1} {side:10s} {figures}", flush=True)
    summary: dict = {}
    for side, runs in per_side.items():
        summary[side] = {}
        for op in OPS:
            rates = [r[op]["ops_per_s"] for r in runs]
            p50s = [r[op]["p50_ms"] for r in runs]
            summary[side][op] = {
                "ops_per_s_median": round(statistics.median(rates), 1),
                "ops_per_s_min": min(rates),
                "ops_per_s_max": max(rates),
                "p50_ms_median": round(statistics.median(p50s), 4),
                "rounds": rates,
            }
    print(f"\nmedian ops/s over {args.rounds} rounds [min-max], {args.backend}:")
    for side in sides:
        cells = [
            f"{op} {summary[side][op]['ops_per_s_median']:>8.0f} "
            f"[{summary[side][op]['ops_per_s_min']:.0f}-{summary[side][op]['ops_per_s_max']:.0f}]"
            for op in OPS
        ]
        print(f"  {side:10s} ({durability[side]}) " + "  ".join(cells))
    for a, b in (
        ("after", "reference"),
        ("after", "before"),
        ("after", "raw"),
        ("reference", "raw"),
    ):
        if a in summary and b in summary:
            ratios = {
                op: round(
                    summary[a][op]["ops_per_s_median"] / summary[b][op]["ops_per_s_median"], 2
                )
                for op in OPS
            }
            print(f"  {a}/{b}: {ratios}")
    result = {
        "backend": args.backend,
        "sides": sides,
        "rounds": args.rounds,
        "n": args.n,
        "sqlite_sync": args.sqlite_sync,
        "durability": durability,
        "before_tree": args.before_tree,
        "summary": summary,
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
