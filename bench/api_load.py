"""The receipts API under load: list (GET) and idempotent upsert (PUT) under gunicorn.

gunicorn (``-w 2``) on 127.0.0.1 with a PostgreSQL database seeded to 100,000 receipts; the
load tool is ``wrk`` (Debian package) on loopback, each run bounded by ``--duration``. The PUT
uses a generated Lua script (written to ``var/bench``, it holds a throwaway token) so every
request carries a new idempotency key.

    .venv/bin/python bench/api_load.py [--quick] [--duration 20] [--connections 8]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import djbench  # noqa: E402
import workload as wl  # noqa: E402

PG_DB = "opensquilla_bench_api"

PUT_LUA = """
local token = "%(token)s"
local run = "%(run)s"
wrk.method = "PUT"
wrk.headers["Authorization"] = "Bearer " .. token
wrk.headers["Content-Type"] = "application/json"
local counter = 0
local tid = 0
local threads = {}
function setup(thread)
  thread:set("tid", #threads + 1)
  table.insert(threads, thread)
end
function request()
  counter = counter + 1
  local s = counter %% 500
  local body = string.format(
    '{"session_key":"agent:main:wrk-%%d","session_id":"sid-%%d","scope":"checkpoint",' ..
    '"idempotency_key":"wrk:%%s:%%d:%%d","status":"checkpoint_saved","coverage_entry_count":%%d}',
    s, s, run, tid, counter, counter %% 200)
  return wrk.format("PUT", "/api/v1/receipts", nil, body)
end
"""


def parse_wrk(text: str) -> dict:
    def ms(value: str) -> float:
        num, unit = re.match(r"([\d.]+)(us|ms|s|m)", value).groups()
        return float(num) * {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}[unit]

    out: dict = {}
    m = re.search(r"Requests/sec:\s+([\d.]+)", text)
    out["requests_per_s"] = float(m.group(1)) if m else None
    m = re.search(r"(\d+) requests in ([\d.]+\w+)", text)
    out["requests"] = int(m.group(1)) if m else None
    for q in ("50", "90", "99"):
        m = re.search(rf"^\s+{q}(?:\.000)?%\s+([\d.]+\w+)", text, re.M)
        out[f"p{q}_ms"] = round(ms(m.group(1)), 3) if m else None
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    out["non_2xx"] = int(m.group(1)) if m else 0
    m = re.search(r"Socket errors: (.*)", text)
    out["socket_errors"] = m.group(1) if m else None
    return out


def run_wrk(url: str, *, duration: int, connections: int, extra: list[str]) -> dict:
    args = [
        "wrk",
        "-t",
        "2",
        "-c",
        str(connections),
        "-d",
        f"{duration}s",
        "--timeout",
        "10s",
        "--latency",
        *extra,
        url,
    ]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=duration + 60, check=True)
    parsed = parse_wrk(proc.stdout)
    parsed["command"] = " ".join(
        a if "Bearer" not in a else "Authorization: Bearer <token>" for a in args
    )
    return parsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--duration", type=int, default=20)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument(
        "--conn-max-age",
        type=int,
        default=None,
        help="run gunicorn with DATABASE_CONN_MAX_AGE=N (persistent connections); "
        "the result goes to var/bench/api_load_conn<N>.json",
    )
    args = parser.parse_args()
    if args.conn_max_age is not None:
        os.environ["DATABASE_CONN_MAX_AGE"] = str(args.conn_max_age)
    if args.quick:
        args.duration, args.rows = 4, 10_000
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    url = djbench.fresh_database("postgres", PG_DB)
    djbench.setup_django(url)
    djbench.bulk_seed(wl.receipt_row("api", i, sessions=20_000) for i in range(args.rows))
    from opensquilla_site.tokens import create_api_token

    admin = djbench.make_admin()
    _, read_token = create_api_token(user=admin, name="bench-read", scope="read")
    _, op_token = create_api_token(user=admin, name="bench-operate", scope="operate")
    lua = wl.RESULTS_DIR / "wrk_put.lua"
    lua.write_text(PUT_LUA % {"token": op_token, "run": str(int(time.time()))})
    from receipts_app.models import MemoryDurableReceipt

    before = MemoryDurableReceipt.objects.count()
    results = {}
    with djbench.running() as procs:
        port = djbench.free_port()
        djbench.start_gunicorn(procs, url, port, workers=2, tag="api")
        base = f"http://127.0.0.1:{port}"
        auth = ["-H", f"Authorization: Bearer {read_token}"]
        cases = {
            "list_first_page": f"{base}/api/v1/receipts?limit=50",
            "list_status_filter": f"{base}/api/v1/receipts?status=checkpoint_failed&limit=50",
        }
        for name, target in cases.items():
            results[name] = run_wrk(
                target, duration=args.duration, connections=args.connections, extra=auth
            )
            djbench.emit(f"GET {name:20s} {results[name]}")
        results["upsert_put"] = run_wrk(
            f"{base}/api/v1/receipts",
            duration=args.duration,
            connections=args.connections,
            extra=["-s", str(lua)],
        )
        djbench.emit(f"PUT upsert               {results['upsert_put']}")
    lua.unlink(missing_ok=True)
    results["upsert_put"]["rows_added"] = MemoryDurableReceipt.objects.count() - before
    result = {
        "database_url": url,
        "versions": djbench.versions(),
        "machine": wl.machine_info(),
        "quick": args.quick,
        "seeded_rows": args.rows,
        "gunicorn_workers": 2,
        "wrk": {"threads": 2, "connections": args.connections, "duration_s": args.duration},
        "results": results,
        "conn_max_age": int(os.environ.get("DATABASE_CONN_MAX_AGE", "0")),
    }
    name = "api_load" if args.conn_max_age is None else f"api_load_conn{args.conn_max_age}"
    print(f"wrote {wl.write_result(name, result)}")


if __name__ == "__main__":
    main()
