"""Writes docs/PERFORMANCE.md from the JSON results kept in bench/results/ (never from memory).

    .venv/bin/python bench/report.py                        # rewrite the page from bench/results
    .venv/bin/python bench/report.py --adopt var/bench/X.json [...]   # keep a run, then rewrite
    .venv/bin/python bench/report.py --check                # exit 1 if the page has drifted

A benchmark writes its result to ``var/bench/<name>.json`` (git-ignored). ``--adopt`` copies
the runs that back the current figures into ``bench/results/`` (committed, small), and the
page is rendered from those files alone: the same JSON always gives the same page, and the
suite checks that it does (``tests/site/test_performance_doc.py``). History lives in git.

Figures whose run predates this generator and whose JSON was not kept are in
``bench/results/carried.json``, each with the command, date, commit and load of its run, as
the page showed them; re-running a benchmark and adopting its JSON replaces the row.
"""

from __future__ import annotations

import argparse
import difflib
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
DOC = ROOT / "docs" / "PERFORMANCE.md"

OPS = {
    "upsert_distinct": "distinct upserts",
    "upsert_conflict": "conflicting re-upserts",
    "status_update": "status updates",
}
DURABLE_GOAL = 0.9  # durable writes: ours ≥ 0.9 of the raw floor's rate
CPU_GOAL = 1.5  # CPU per write: ours ≤ 1.5× the raw floor's
SUITE_GOAL_S = 8 * 60  # the whole suite within 8 minutes


# --- formatting ----------------------------------------------------------------------------------


def num(v: float, nd: int = 0) -> str:
    return f"{v:,.{nd}f}"


def spread(s: dict, nd: int = 2, unit: str = "") -> str:
    """``median [min–max]`` of per-round values."""
    return f"{s['median']:,.{nd}f}{unit} [{s['min']:,.{nd}f}–{s['max']:,.{nd}f}]"


def met(ok: bool | None) -> str:
    return "—" if ok is None else ("✅ met" if ok else "❌ missed")


def when(r: dict) -> str:
    date = str(r.get("finished_at", ""))[:16].replace("T", " ")
    commit = r.get("commit", "?") + (" (+ uncommitted changes)" if r.get("dirty") else "")
    return f"{date} UTC, {commit}"


def load_of(r: dict) -> str:
    loads = r.get("loadavg_per_round")
    if loads:
        return f"{min(loads):.1f}–{max(loads):.1f}"
    if "load_before" in r:
        return f"{r['load_before']:.1f} → {r['load_after']:.1f}"
    return f"{r['machine']['loadavg'][0]:.1f}"


def cmd(r: dict) -> str:
    return f"`.venv/bin/python {r['command'].strip()}`"


# --- loading -------------------------------------------------------------------------------------


def load_results() -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))}


def by_kind(results: dict[str, dict], kind: str) -> list[dict]:
    return [r for r in results.values() if r.get("kind") == kind]


# --- figures: each returns table rows and detail sections ------------------------------------------

Row = dict[str, str]


def _row(figure: str, value: str, goal: str, ok: bool | None, r: dict, limit: str) -> Row:
    return {
        "figure": figure,
        "value": value,
        "goal": goal,
        "met": met(ok),
        "measured": f"{when(r)}; load {load_of(r)}",
        "command": cmd(r),
        "limit": limit,
    }


def _write_label(r: dict) -> str:
    if r["backend"] == "sqlite":
        return f"SQLite `synchronous={r['sqlite_sync']}`"
    return f"PostgreSQL `synchronous_commit={r['pg_sync']}`"


def _durable(r: dict) -> bool:
    return r["sqlite_sync"] == "FULL" if r["backend"] == "sqlite" else r["pg_sync"] == "on"


def write_figures(runs: list[dict]) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    detail: list[str] = []
    for r in sorted(runs, key=lambda r: (r["backend"] != "sqlite", not _durable(r))):
        ratios, summary, label = r["ratios"], r["summary"], _write_label(r)
        if "fsync" in summary and _durable(r):
            f = summary["fsync"]
            rows.append(
                _row(
                    f"fsync floor: one 4 KiB page `pwrite` + `fdatasync` ({label} run)",
                    f"{spread(f['median_ms'], 3, ' ms')} = {num(f['syncs_per_s']['median'])} "
                    "syncs/s"
                    + (
                        f"; {f['commit_sized']['pages']} pages + `fdatasync`: "
                        f"{spread(f['commit_sized']['median_ms'], 3, ' ms')}"
                        if "commit_sized" in f
                        else ""
                    ),
                    "a measurement (the disk's limit)",
                    None,
                    r,
                    "fsync",
                )
            )
        if "fsync" in summary and _durable(r):
            for side in (s for s in r["sides"] if s != "fsync"):
                q = ratios[f"{side}/fsync"]
                rows.append(
                    _row(
                        f"{SIDE_NAMES.get(side, side)}, {label}: writes/s as a fraction of the "
                        "fsync floor (one-page syncs/s)",
                        "; ".join(f"{name} {spread(q[op]['rate'])}" for op, name in OPS.items()),
                        "a measurement",
                        None,
                        r,
                        "fsync",
                    )
                )
        if "after/raw" in ratios and _durable(r):
            for op, name in OPS.items():
                q = ratios["after/raw"][op]["rate"]
                rows.append(
                    _row(
                        f"durable {name}, {label}: ours / raw floor (rate)",
                        spread(q),
                        f"≥ {DURABLE_GOAL}",
                        q["median"] >= DURABLE_GOAL,
                        r,
                        "durable",
                    )
                )
        if "after/raw" in ratios and not _durable(r):
            for op, name in OPS.items():
                q = ratios["after/raw"][op]["cpu"]
                rows.append(
                    _row(
                        f"CPU per {name[:-1]}, {label}: ours / raw floor",
                        f"{spread(q)}× ({num(summary['after'][op]['cpu_us']['median'])} vs "
                        f"{num(summary['raw'][op]['cpu_us']['median'])} µs)",
                        f"≤ {CPU_GOAL}×",
                        q["median"] <= CPU_GOAL,
                        r,
                        "cpu",
                    )
                )
        detail += _write_detail(r)
    return rows, detail


def _write_detail(r: dict) -> list[str]:
    summary, ratios = r["summary"], r["ratios"]
    sides = [s for s in r["sides"] if s != "fsync"]
    out = [
        f"### {_write_label(r)}: {r['rounds']} interleaved rounds × {r['n']:,} writes of each kind",
        "",
        f"{cmd(r)} — {when(r)}; 1-minute load {load_of(r)} across the rounds. Median over the "
        "rounds [min–max]; ratios are taken within each round (both sides saw the same moments "
        "of the machine), then their median and spread. Durability read back from each side's "
        "own connection: " + ", ".join(f"{s} {r['durability'][s]}" for s in r["sides"]) + ".",
        "",
    ]
    if "fsync" in summary:
        f = summary["fsync"]
        out += [
            f"fsync floor: {f['count']} × (`pwrite` of one 4 KiB page + `fdatasync`) per round on "
            f"the databases' file system: median {spread(f['median_ms'], 3, ' ms')}, i.e. "
            f"{num(f['syncs_per_s']['median'])} syncs/s; p10–p90 within the rounds "
            + ", ".join(f"{a:.3f}–{b:.3f}" for a, b in zip(f["p10_ms"], f["p90_ms"], strict=True))
            + " ms."
            + (
                f" A commit-sized write ({f['commit_sized']['pages']} pages rewritten, then "
                f"`fdatasync`; {f['commit_sized']['count']} per round): "
                f"{spread(f['commit_sized']['median_ms'], 3, ' ms')}, "
                f"{num(f['commit_sized']['syncs_per_s']['median'])}/s."
                if "commit_sized" in f
                else ""
            ),
            "",
        ]
    sqlite = r["backend"] == "sqlite"
    head = "| side | " + " | ".join(f"{n}/s" for n in OPS.values()) + " | CPU µs per write |"
    head += " KiB written per write |" if sqlite else ""
    out += [head, "|---|---|---|---|---|" + ("---|" if sqlite else "")]
    for side in sides:
        cells = [
            f"{num(summary[side][op]['ops_per_s_median'])} "
            f"[{num(summary[side][op]['ops_per_s_min'])}–{num(summary[side][op]['ops_per_s_max'])}]"
            for op in OPS
        ]
        cpu = " / ".join(num(summary[side][op]["cpu_us"]["median"]) for op in OPS)
        line = f"| {SIDE_NAMES.get(side, side)} | " + " | ".join(cells) + f" | {cpu} |"
        if sqlite:
            line += " " + " / ".join(num(summary[side][op]["write_kib"]["median"], 1) for op in OPS)
            line += " |"
        out.append(line)
    out += [
        "",
        ("CPU and KiB columns" if sqlite else "CPU column")
        + ": distinct upserts / conflicting re-upserts / status updates. "
        + (
            "KiB written per write: the process's write system calls (`/proc/self/io`), i.e. the "
            "WAL frames each commit appends plus its share of checkpoints."
            if sqlite
            else "On PostgreSQL the CPU is the client process's only."
        ),
    ]
    out += ["", "| ratio (per round) | " + " | ".join(OPS.values()) + " |", "|---|---|---|---|"]
    pairs = [("after", "raw"), ("reference", "raw"), ("after", "reference")]
    if "fsync" in summary:
        pairs += [(s, "fsync") for s in sides]
        pairs += [(s, "fsync_commit") for s in sides]
    for a, b in pairs:
        key = f"{a}/{b}"
        if key not in ratios:
            continue
        out.append(
            f"| {a} / {b}, rate | "
            + " | ".join(spread(ratios[key][op]["rate"]) for op in OPS)
            + " |"
        )
        if "cpu" in ratios[key][next(iter(OPS))]:
            out.append(
                f"| {a} / {b}, CPU per write | "
                + " | ".join(spread(ratios[key][op]["cpu"]) for op in OPS)
                + " |"
            )
    return out + [""]


def profile_detail(runs: list[dict]) -> list[str]:
    out: list[str] = []
    for r in runs:
        out += [
            f"### Where ours spends its CPU: SQLite `synchronous={r['sqlite_sync']}`, profiled",
            "",
            f"{cmd(r)} — {when(r)}; load {load_of(r)}. {r['writes']:,} writes (the three kinds) "
            "under `cProfile` on the process CPU clock, each function's own time summed by "
            f"bucket: {num(r['profiled_cpu_us_per_write'])} µs per write profiled. The profiler "
            "charges every Python call and not the work inside SQLite's C calls, so the Python "
            "buckets are an upper bound and the unprofiled ratio above is the figure.",
            "",
            "| bucket | share | µs per write (profiled) |",
            "|---|---|---|",
            *[
                f"| {b['label']} | {b['share']:.0%} | {num(b['us_per_write'], 1)} |"
                for b in r["buckets"]
            ],
            "",
            "Largest single functions (own time, µs per write, profiled): "
            + "; ".join(
                f"`{t['function']}` {num(t['us_per_write'], 1)}" for t in r["top_functions"]
            )
            + ".",
            "",
        ]
    return out


SIDE_NAMES = {
    "after": "ours (`receipts_app.ledger`)",
    "raw": "raw floor (the ledger's statements, raw driver)",
    "reference": "reference opensquilla 0.3.0",
    "before": "before (another checkout)",
}


def suite_figures(runs: list[dict]) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    detail = [
        "| run | passes | wall | counts | load before → after | measured |",
        "|---|---|---|---|---|---|",
    ]
    for r in sorted(runs, key=lambda r: r["name"]):
        backend = "PostgreSQL + Redis" if r["env"].get("DATABASE_URL") else "SQLite"
        parallel = any(" -n " in p["command"] for p in r["passes"])
        counts = "; ".join(
            ", ".join(f"{n} {what}" for what, n in p["counts"].items()) for p in r["passes"]
        )
        rows.append(
            {
                "figure": f"test suite, {backend}, {'parallel' if parallel else 'serial'} "
                f"(`{r['name']}`)",
                "value": f"{r['wall_s'] / 60:.1f} min ({num(r['wall_s'])} s), exit "
                f"{r['exit_code']}",
                "goal": f"≤ {SUITE_GOAL_S // 60} min",
                "met": met(r["wall_s"] <= SUITE_GOAL_S and r["exit_code"] == 0),
                "measured": f"{when(r)}; load {load_of(r)}",
                "command": "; ".join(f"`{p['command']}`" for p in r["passes"]),
                "limit": "suite",
            }
        )
        detail.append(
            f"| `{r['name']}` | {len(r['passes'])} | {num(r['wall_s'])} s | {counts} | "
            f"{load_of(r)} | {when(r)} |"
        )
    return rows, detail + [""]


FLEET_PAGES = {
    "fleet_view": "fleet view (`/fleet/`, what the overview loads)",
    "fleet_view_scoped": "fleet view, overview scoped to one gateway",
    "receipts_one_gateway": "receipts list, one gateway",
    "failed_tab_one_gateway": "failed tab, one gateway",
    "at_risk_link_one_gateway": "the fleet's *at risk* link (6 statuses, one gateway)",
    "backlog_link_one_gateway": "the fleet's *queued* link (3 statuses, one gateway)",
    "given_up_link_one_gateway": "the fleet's *given up* link (2 statuses, one gateway)",
    "overview": "the overview itself (no goal here; bench/scale.py times it)",
}
FLEET_ROWS = {
    "the overview's fleet view": ("fleet_view", "fleet_view_scoped"),
    "every receipts page filtered by one gateway": (
        "receipts_one_gateway",
        "failed_tab_one_gateway",
        "at_risk_link_one_gateway",
        "backlog_link_one_gateway",
        "given_up_link_one_gateway",
    ),
}


def _mirror_fleet_load(r: dict) -> str:
    phases = r["loadavg"]
    return ", ".join(
        f"{phase} {v['min']:.1f}–{v['max']:.1f}"
        for phase, v in phases.items()
        if phase in ("lag", "idle")
    )


LIGHT_LAG_GOAL_S = 1.0
LIGHT_CPU_PER_ROW_MS = 0.25


def mirror_fleet_figures(runs: list[dict]) -> tuple[list[Row], list[str]]:
    """``bench/mirror_fleet.py``: many gateways followed into one PostgreSQL."""
    rows: list[Row] = []
    detail: list[str] = []
    for r in sorted(runs, key=lambda r: r["name"]):
        o, n, mode = r["overall"], r["gateways"], r["mode"]
        many = f"{n} gateways at once" if n != 1 else "1 gateway"
        gateways = f"{n} gateways" if n != 1 else "1 gateway"
        how = (
            "a follower process each" if mode == "processes" else "one `run_mirror`, a thread each"
        )
        rates = [g["achieved_rate_per_s"] for g in r["per_gateway"].values()]
        measured = f"{when(r)}; load {_mirror_fleet_load(r)}"
        light = r.get("writer") == "light"
        # The light writer (plain sqlite3 in the 0.3.0 schema) makes 10 x 100/s possible on
        # this machine, so its runs are held to the fleet's own goals: p99 within 1 s, nothing
        # lost or duplicated, 0.25 ms of follower CPU a row, a long session within 20 %.
        lag_goal = LIGHT_LAG_GOAL_S if light else r["lag_goal_s"]
        lag_met = o["worst_gateway_lag_p99_s"] <= lag_goal and o.get("asked_rate_reached", True)
        lost = o.get("rows_lost", 0) + o.get("rows_duplicated", 0)
        writer = "the light writer" if light else "the reference"
        rows.append(
            {
                "figure": f"mirror lag, {many} ({how}), each written by {writer} at "
                f"{r['rate_per_gateway']:g} receipts/s asked (achieved "
                f"{min(rates):.1f}–{max(rates):.1f}/s), into one PostgreSQL (`{r['name']}`)",
                "value": f"worst gateway p99 {o['worst_gateway_lag_p99_s']:.2f} s; all: p50 "
                f"{o['lag_p50_s']:.2f} s, p99 {o['lag_p99_s']:.2f} s, max {o['lag_max_s']:.2f} s; "
                f"{o['not_applied']} not applied"
                + (
                    f"; {o.get('rows_lost', 0)} lost, {o.get('rows_duplicated', 0)} duplicated"
                    if light
                    else ""
                ),
                "goal": f"p99 ≤ {lag_goal:g} s per gateway" + (", 0 lost" if light else ""),
                "met": met(lag_met and (lost == 0 if light else o["lag_goal_met"])),
                "measured": measured,
                "command": cmd(r),
                "limit": "mirror_fleet",
            }
        )
        long = r.get("long_session")
        if light and r.get("cpu_budget"):
            per_row = r["cpu_budget"]["follower_cpu_ms_per_row_applied"]
            rows.append(
                {
                    "figure": f"mirror follower CPU per row applied, {gateways} (`{r['name']}`)",
                    "value": f"{per_row:.3f} ms",
                    "goal": f"≤ {LIGHT_CPU_PER_ROW_MS:g} ms",
                    "met": met(per_row <= LIGHT_CPU_PER_ROW_MS),
                    "measured": measured,
                    "command": cmd(r),
                    "limit": "mirror_fleet",
                }
            )
        if long:
            lo = long["overall"]
            ratio = long["follower_cpu_per_row_vs_short"]
            rows.append(
                {
                    "figure": f"the same, each session already {num(long['entries_before'])} "
                    f"entries long (`{r['name']}`)",
                    "value": f"worst gateway p99 {lo['worst_gateway_lag_p99_s']:.2f} s; follower "
                    f"CPU per row {long['cpu_budget']['follower_cpu_ms_per_row_applied']:.3f} ms "
                    f"= ×{ratio:.2f} the short session's",
                    "goal": "within 20 % of the short session (×1.2)",
                    "met": met(ratio <= 1.2 and lo["worst_gateway_lag_p99_s"] <= lag_goal),
                    "measured": measured,
                    "command": cmd(r),
                    "limit": "mirror_fleet",
                }
            )
        budget = r.get("cpu_budget")
        if budget:
            rows.append(
                {
                    "figure": f"CPU per receipt write, {gateways} (`{r['name']}`): "
                    f"{writer}'s, and our follower's per write applied",
                    "value": f"writer {budget['writer_cpu_ms_per_write']:.2f} ms, follower "
                    f"{budget['follower_cpu_ms_per_write']:.2f} ms; at "
                    f"{r['rate_per_gateway']:g}/s × {n} the writers alone need "
                    f"{budget['writers_cores_at_asked_rate']:.1f} cores, the followers "
                    f"{budget['followers_cores_at_asked_rate']:.1f}; this machine has "
                    f"{budget['cores']}",
                    "goal": "the asked load fits the machine",
                    "met": met(o.get("asked_rate_reached", True)),
                    "measured": measured,
                    "command": cmd(r),
                    "limit": "mirror_fleet",
                }
            )
        rows.append(
            {
                "figure": f"mirror follower's idle cost per gateway, {gateways} "
                f"({r['idle_seconds']:g} s, sources unchanged; `{r['name']}`)",
                "value": f"worst {o['worst_gateway_idle_cpu_percent']:.2f} % of one core",
                "goal": f"≤ {r['idle_goal_percent']:g} %",
                "met": met(o["idle_goal_met"]),
                "measured": measured,
                "command": cmd(r),
                "limit": "mirror_fleet",
            }
        )
        detail += [
            f"`{r['name']}` ({how}; poll interval {r['interval_s']:g} s; writing took "
            f"{r['writing_wall_s']:g} s for {r['seconds']:g} s of writes asked; load average "
            + ", ".join(
                f"{phase} {v['min']:.1f}–{v['max']:.1f} (mean {v['mean']:.1f})"
                for phase, v in r["loadavg"].items()
            )
            + "):",
            "",
            "| gateway | writes/s achieved | applied | lag p50 | lag p99 | lag max | follower CPU "
            "while written | idle CPU |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for name, g in r["per_gateway"].items():
            busy = g.get("busy_cpu_percent_of_core")
            detail.append(
                f"| `{name}` | {g['achieved_rate_per_s']:.1f} | {g['applied']}/{g['committed']} | "
                f"{g['lag_p50_s']:.2f} s | {g['lag_p99_s']:.2f} s | {g['lag_max_s']:.2f} s | "
                f"{'—' if busy is None else f'{busy:.1f} %'} | "
                f"{g['idle_cpu_percent_of_core']:.2f} % |"
            )
        detail.append("")
    return rows, detail


def fleet_figures(runs: list[dict]) -> tuple[list[Row], list[str]]:
    """``bench/fleet_view.py``: per run, the worst page of each group against the goal."""
    rows: list[Row] = []
    detail: list[str] = []
    for r in sorted(runs, key=lambda r: r["name"]):
        goal = f"≤ {num(r['goal_ms'])} ms, ≤ {r['goal_queries']} queries"
        where = f"{num(r['rows'])} receipts over {r['gateways']} gateways, PostgreSQL"
        for label, names in FLEET_ROWS.items():
            figs = [r["pages"][n] for n in names if n in r["pages"]]
            worst_ms = max(f["median_ms"] for f in figs)
            worst_q = max(f["queries"] for f in figs)
            ok = worst_ms <= r["goal_ms"] and worst_q <= r["goal_queries"]
            rows.append(
                _row(
                    f"{label} ({where}; the slowest of {len(figs)} page"
                    f"{'s' if len(figs) > 1 else ''}, median of {r['repeats']})",
                    f"{worst_ms:,.1f} ms, {worst_q} queries",
                    goal,
                    ok,
                    r,
                    "fleet",
                )
            )
        # Runs since the render split was measured say how much of the CPU was templates.
        split = all("render_ms" in fig for fig in r["pages"].values())
        detail += [
            f"`{r['name']}`: {where}" + (f". {r['note']}" if r.get("note") else "") + ".",
            "",
            "| page | median [min–max] | CPU (this process) |"
            + (" of which templates |" if split else "")
            + " queries | SQL | URL |",
            "|---|---|---|" + ("---|" if split else "") + "---|---|---|",
        ]
        for name, fig in r["pages"].items():
            detail.append(
                f"| {FLEET_PAGES.get(name, name)} | {fig['median_ms']:,.1f} ms "
                f"[{fig['min_ms']:,.1f}–{fig['max_ms']:,.1f}] | {fig['cpu_median_ms']:,.1f} ms | "
                + (f"{fig['render_ms']:,.1f} ms | " if split else "")
                + f"{fig['queries']} | {fig['sql_ms']:,.1f} ms | `{fig['url']}` |"
            )
        detail.append("")
    return rows, detail


def embedded_broker_figures(runs: list[dict]) -> list[Row]:
    """``bench/embedded_broker.py``: one worker on the embedded SQLite broker."""
    rows: list[Row] = []
    for r in sorted(runs, key=lambda r: r["name"]):
        goals = r["goals"]
        if "trivial" in r:
            t = r["trivial"]
            rows.append(
                _row(
                    f"Embedded broker: trivial tasks through one worker process "
                    f"({num(t['tasks'])} queued before it starts)",
                    f"{num(t['tasks_per_s'], 1)} tasks/s",
                    f"≥ {goals['trivial_tasks_per_s']} tasks/s",
                    t["finished"] and t["tasks_per_s"] >= goals["trivial_tasks_per_s"],
                    r,
                    "embedded_broker",
                )
            )
        if "requeue" in r:
            q = r["requeue"]
            rows.append(
                _row(
                    f"Embedded broker: bulk requeue of {num(q['receipts'])} failed checkpoints "
                    "(one requeue plan, one worker with 2 children, each a real checkpoint)",
                    f"{num(q['wall_s'], 1)} s ({num(q['receipts_per_s'], 1)} receipts/s)",
                    f"≤ {goals['requeue_1000_s']} s for 1,000",
                    q["finished"] and q["wall_s"] * 1000 / q["receipts"] <= goals["requeue_1000_s"],
                    r,
                    "embedded_broker",
                )
            )
    return rows


def scrub_figures(runs: list[dict]) -> tuple[list[Row], list[str]]:
    """``bench/scrub.py``: the checkpoint scrub against the disk and the bare floor, and a cycle
    with nothing changed."""
    rows: list[Row] = []
    detail: list[str] = []
    for r in sorted(runs, key=lambda r: r["name"]):
        where = (
            f"{num(r['checkpoints'])} checkpoints of {r['events_per_checkpoint']} events "
            f"(~{num(r['checkpoint_bytes_mean'] / 1024, 1)} KiB), files dropped from the page "
            f"cache, {r['backend']}, {r['reader_processes']} reader processes"
        )
        disk = _range(r, "disk_mb_per_s", 0)
        floor = _range(r, "floor_mb_per_s", 0)
        for run in r["full"]:
            ok = run["ratio_to_disk"] is not None and run["ratio_to_disk"] >= 0.5
            rows.append(
                _row(
                    f"Scrub, {run['label']}, unthrottled ({where})",
                    f"{_range(run, 'mb_per_s', 0)} MB/s = {_range(run, 'ratio_to_disk', 2)} of "
                    f"the disk's {disk} MB/s sequential read, "
                    f"{_range(run, 'ratio_to_floor', 2)} of the bare floor's {floor} MB/s; "
                    f"{num(run['checkpoints_per_s'])} checkpoints/s; "
                    f"{num(run['cpu_ms_per_mb'], 1)} ms CPU per MB (scrub and readers)",
                    "≥ 0.5 of the disk's sequential read rate",
                    ok,
                    r,
                    "scrub",
                )
            )
        u = r["unchanged"]
        rows.append(
            _row(
                f"Scrub, a cycle with nothing changed, at 1M checkpoint receipts (measured at "
                f"{num(u['checkpoints'])} and extrapolated linearly; "
                f"{u['cycle_seconds']:.0f} s cycle; {r['backend']}, process CPU)",
                f"{u['core_share_at_1m_percent']} % of a core ({u['cpu_us_per_checkpoint']} µs "
                f"a checkpoint; {u['files_read']} files, {u['bytes_read']} bytes read)",
                "≤ 1 % of a core",
                u["core_share_at_1m_percent"] <= u["goal_percent"],
                r,
                "scrub",
            )
        )
        loads = [r["load_before"], r["load_after"]]
        detail += [
            f"`{r['name']}`: {where}; {len(r['rounds'])} interleaved rounds, each a disk read, "
            "a bare read, a first read and a full re-read; medians [min–max] over the rounds, "
            f"load {min(loads):.1f} to {max(loads):.1f} on {r['machine']['nproc']} cores. The "
            "disk's rate is one cold sequential read of a file as large as the checkpoint set. "
            "The bare floor reads the same cold files with nothing but open, "
            "`POSIX_FADV_WILLNEED`, one read and sha256, in as many processes as the scrub's "
            "readers: no database, no checks. A checkpoint is a file of its own in a directory "
            "of its own (as the writer lays them out), so a cold full read is many small reads "
            "against the disk's one long one. The first read parses every file; a later full "
            "cycle hashes bytes it already parsed. The nothing-changed cycle's CPU includes "
            "SQLite's (in process); on PostgreSQL the server's is not in it.",
            "",
        ]
    return rows, detail


def _range(values: dict, key: str, digits: int) -> str:
    """``median [min–max]`` of a figure measured over rounds."""
    low, high = values.get(f"{key}_min"), values.get(f"{key}_max")
    middle = f"{values[key]:,.{digits}f}"
    if low is None or high is None:
        return middle
    return f"{middle} [{low:,.{digits}f}–{high:,.{digits}f}]"


def carried_figures(results: dict[str, dict]) -> list[Row]:
    carried = results.get("carried")
    if not carried:
        return []
    return [
        {
            "figure": f["figure"] + " *(carried)*",
            "value": f["value"],
            "goal": f.get("goal") or "— (no goal set)",
            "met": met(f.get("met")),
            "measured": f"{f['date']}, {f['commit']}; load {f['load']}",
            "command": f"`{f['command']}`",
            "limit": f["limit"],
        }
        for f in carried["figures"]
    ]


# --- what limits each figure (analysis of the code and of the measurements) -----------------------

LIMITS = {
    "fsync": (
        "The disk's own commit floor, not the code's: a virtual disk (ext4 on `/dev/vda`) shared "
        "by every process on the machine, whose sync cost moves by a factor of several between "
        "minutes. It is measured in the same rotation as the writers so the two can be compared; "
        "a durable commit needs at least one of these syncs (SQLite WAL at `synchronous=FULL`: "
        "one `fdatasync` of the WAL per commit, plus a sync of the database file at each WAL "
        "checkpoint; PostgreSQL: one WAL flush per commit, on the same file system)."
    ),
    "durable": (
        "Ours and the raw floor run the same statements on the same schema, so each commit "
        "appends the same WAL pages (the KiB-per-write column: the row and its index entries, "
        "the counts and failure-inbox rows the triggers write, the audit event of a status "
        "change) and syncs once. What separates them is the Python between the statements "
        "(building the row, `Model.from_db`, Django's connection and cursor machinery). When "
        "the sync is slow both converge on the disk; when it is fast the ratio approaches the "
        "CPU ratio. On a machine whose other tenants keep both cores busy, a writer also waits "
        "for a core between commits, which widens every side's spread. The reference "
        "opensquilla 0.3.0 writes a lighter row on its own schema (fewer indexes, no audit, no "
        "counts: see its KiB per write), so it can sit above this floor: the raw side is the "
        "floor of *our* ledger's work, not of the reference's."
    ),
    "cpu": (
        "At `synchronous=OFF` no side waits for the disk, so the CPU per write is the cost of "
        "the code (SQLite runs inside the writing process). The raw floor spends its time in "
        "SQLite itself (statements, triggers, B-tree updates, the commit's WAL writes); ours "
        "adds the ledger's Python per write: `_prepare_for_write` (canonical key, agent id), "
        "`write_values`, `MemoryDurableReceipt.from_db` for the returned row, the actor lookup, "
        "and Django's connection proxies and cursor wrapper (async-safety and thread checks) "
        "on every statement; the profile above splits it by bucket. What would take ours "
        "closer: one raw cursor kept per connection instead of a Django cursor per write, the "
        "connection looked up once per write rather than per statement, and the returned row "
        "built without a model instance where the caller does not need one. None of these is "
        "built yet."
    ),
    "suite": (
        "Two shared cores. The parallel pass is bounded by its longest group: the tests that "
        "start real Celery workers run one at a time in one xdist group (each waits for a worker "
        "process to start and to drain its queue), while the other worker runs everything else; "
        "the browser tests then run serially, one Chromium. Creating a test database per worker "
        "(migrations) costs each worker a few seconds. Two workers need two idle cores: when "
        "the machine's other tenants keep both busy (a load of 4 and more), a second worker "
        "gets little CPU a serial run would not, so compare runs only at a similar load, which "
        "each row gives."
    ),
    "pages": (
        "Every console page runs a fixed number of queries (at most 8, held by "
        "`tests/console/test_query_counts.py`) whose plans are index probes or index-ordered "
        "scans that stop at the page size, so the time does not grow with the ledger; status tabs "
        "and totals read the counts table (`receipts_app_receiptcount`) instead of counting rows. "
        "What is left is template rendering and per-request overhead (session, user, "
        "permissions: 3 queries). The overview's health check probes a partial index "
        "(`idx_mdr_hash_mismatch`) and reads an agent's 1,000-row window only when it finds a "
        "match."
    ),
    "writes_before": (
        "The count triggers (exact counts under every write path) cost each write its counts "
        "delta row and the trigger's statement: on SQLite within the rounds' spread; on "
        "PostgreSQL about 75 µs of a ~520 µs write at `synchronous_commit=on`. Counting inside "
        "the ledger's own statements would win it back, but needs the prior row's (agent, scope, "
        "status) in the upsert's `RETURNING`, which PostgreSQL 18 gives (`OLD`) and 15 does not."
    ),
    "bulk": (
        "One `INSERT … SELECT FROM unnest(…)` per 1,000 rows with binary parameters; the insert "
        "itself costs 47–80 ms per 1,000 rows because every row updates the table's indexes, and "
        "gunicorn, PostgreSQL and the load generator share the same 2 cores. The count triggers "
        "cost the bulk path nothing measurable (one statement-level call per 1,000 rows). What "
        "would close the gap: fewer indexes, or a load generator on another machine."
    ),
    "concurrent": (
        "The reference's figure is in-process calls on one aiosqlite connection (~0.5 ms each); "
        "ours is an HTTP request through gunicorn, middleware, token authentication, JSON "
        "validation and a durable PostgreSQL commit, with `wrk`, gunicorn and PostgreSQL on the "
        "same 2 cores: at ~1.9 ms of CPU per request the cores cap any per-receipt HTTP writer "
        "near 1,000 requests/s. At the ledger's level (16 threads, no HTTP) ours is 1.67× the "
        "reference. `commit_delay` (commit sharing) measured no gain; the bulk endpoint is the "
        "way to high rates."
    ),
    "put": (
        "A kept connection (`DATABASE_CONN_MAX_AGE=600` by default) and a token check that is one "
        "prepared statement (`opensquilla_site/tokens.py`, `prepared_sql.py`); what remains is "
        "Django's request cycle, validation and the durable commit."
    ),
    "mirror": (
        "The lag is the follower's poll interval (0.5 s by default) plus the pass that applies "
        "the batch; the benchmark polls our ledger every 20 ms, so each figure includes up to "
        "20 ms of polling. The initial import is bounded by Django row preparation per batch "
        "(one transaction per batch, so a kill loses nothing)."
    ),
    "mirror_fleet": (
        "Every gateway's writer is a reference `SessionStorage` process committing a message and "
        "a receipt per write (two durable SQLite commits), and every follower its own Django "
        "process, all on the machine's 2 cores with PostgreSQL. The asked load does not fit "
        "this machine: a reference write costs 6 ms of CPU (the CPU row), so ten writers at "
        "100/s need 6 cores for themselves; here they reach about 16/s each, and the run "
        "measures the lag at that load (met, 0 lost). A busy follower pass is one transaction "
        "of ours (docs/MIRROR.md): about 25 ms of CPU for the pass (its 18 queries) plus about "
        "0.6 ms per row, so a gateway written at 100/s costs its follower about 11 % of a core "
        "(one gateway alone, `mirror_fleet_one`: lag p99 0.7 s) and ten such gateways need a bit over one core for "
        "the followers, besides the writers and PostgreSQL. One `run_mirror` process (the "
        "Procfile's way) runs every follower thread on one interpreter, one core's worth of "
        "Python at most; for many busy gateways, run a follower process per gateway "
        "(`import_opensquilla --follow --gateway NAME`), or one on each gateway's host (the "
        "edge process set, docs/OPERATIONS.md). Idle, a follower costs a `stat` of the file "
        "and its WAL, one `PRAGMA data_version` and one read of its source row per poll "
        "(0.5 s), and a heartbeat every 10 s."
    ),
    "reads": (
        "Both reads are one prepared statement over an index (`idx_mdr_coverage`, "
        "`idx_mdr_status_created`); the reference has no status index and scans."
    ),
    "requeue": (
        "The dry run reads the frozen selection in one ordered stream and classifies 1,000 rows "
        "per batched lookup; execution is set-wise per 1,000-row batch on 2 workers sharing the "
        "2 cores with PostgreSQL and Redis."
    ),
    "fleet": (
        "The fleet view reads three things whatever the fleet or the ledger: the gateways, "
        "the counts table (`receipts_app_receiptcount`, a few rows per gateway, agent and "
        "status) and the mirror's sources, plus the request's session, user and permissions. "
        "A receipts page filtered by one gateway walks an index in the page's order "
        "(`idx_mdr_created`, or `idx_mdr_status_created` for one status) and keeps that "
        "gateway's rows, so it reads about as many rows as there are gateways times the page "
        "size (`EXPLAIN ANALYZE` at 5M rows: 507 index entries, 0.3 ms, for the plain list "
        "and for the failed tab), and its tabs and total come from the counts table. A list "
        "of several statuses at once (the fleet's links) has no index in its order, so "
        "`page_receipts` reads it one status at a time, in one statement: a `UNION ALL` of "
        "one sub-select per status (`status = s`, every other criterion of the filter, the "
        "keyset bound, `ORDER BY created_at DESC, id DESC LIMIT page+1`), ordered and cut "
        "again (`keyset_page_of_parts` in `opensquilla_site/pagination.py`; the same rows in "
        "the same order as the plain query, `tests/receipts_app/test_status_parts_page.py`). "
        "PostgreSQL runs it as a Merge Append of backward walks of `idx_mdr_status_created`, "
        "each stopping at the page size. A status the gateway has none of would still walk "
        "every row of that status on the other gateways (all 5,000 `repair_failed` rows for "
        "the *given up* link here, 17 ms), so each sub-select is guarded by an uncorrelated "
        "`EXISTS` on the counts table (a row of that gateway, agent, scopes and status with a"
        " positive count), which PostgreSQL evaluates once, as a one-time filter, and which "
        "skips the walk. At 5M rows the *given up* link now reads 123 buffers in 0.3 ms "
        "(before: `idx_mdr_created` walked backward, 50,967 rows read, 15 ms), the *backlog* "
        "link 0.4 ms (before 17 ms) and the *at risk* link, six statuses, 0.6 ms (before 6 "
        "ms). Still not bounded: a gateway with a few rows of a status that other gateways "
        "have many of (its walk reads the others' rows until it has a page or reaches the "
        "end). An index leading with the gateway (`gateway_id, status, created_at, id`) would"
        " bound that too, at an index entry on every write; it is not built. The rest of a "
        "receipts page is rendering 50 rows through Django templates (the CPU column, 20 to "
        "30 ms: per row some twenty variable look-ups, the date filters and two `reverse()` "
        "calls); its SQL is 2 to 9 ms. The wall time is the CPU and the SQL plus waiting for "
        "a core: at the load of this run (below 1) every goal page is within 50 ms; at the "
        "loads of 7 to 11 that the machine's other tenants caused during earlier runs, the "
        "same pages took 100 to 160 ms, mostly waiting."
        " On this run's machine (an AMD EPYC, 2 cores) the receipts pages are bound by "
        "Python, not SQL: 40–78 ms of CPU per request, most of it rendering the 50 rows' "
        "template (links reversed and text truncated per row), against 4–15 ms of SQL; the same "
        "pages measured 22–36 ms in an earlier run on an Intel Xeon (commit f1468f6). The overview's own "
        "time (no goal here) is the 24-hour timeline's grouped count over the day's rows "
        "(about 0.2 s at 167k receipts a day) and the health statement; PostgreSQL's JIT, "
        "which spent 2.9 s compiling that statement, is off for our connections "
        "(`OPENSQUILLA_PG_JIT`, docs/OPERATIONS.md)."
    ),
    "api": (
        "gunicorn's 2 sync workers on the 2 cores shared with PostgreSQL and `wrk`: requests/s "
        "is bounded by per-request CPU (token check, 50 rows rendered through pydantic)."
    ),
    "embedded_broker": (
        "Trivial tasks: the worker's own round trip (its pool child, the acknowledgement, the "
        "next take from the file: one `UPDATE … RETURNING` under the write lock, no fsync with "
        "WAL and `synchronous=NORMAL`). A bulk requeue: the checkpoints themselves, each a "
        "transcript read, a JSONL file written and synced and its ledger rows committed "
        "(`synchronous=FULL`), on two children sharing the machine's two cores with everything "
        "else running; the broker's share of it is the trivial figure's few milliseconds."
    ),
    "scrub": (
        "A full cycle is many small files, each in its own directory. Per file the scrub does "
        "a `stat`, an open (`O_NOATIME`), one `readlink` of `/proc/self/fd/N` for the "
        "containment check (the kernel's name for the file actually opened, symlinks "
        "followed), one read of the file's size, a sha256 (about 15 µs for 26 KiB with the "
        "CPU's SHA instructions) and, the first time, a JSON parse; the scrub's own process "
        "walks the receipts, records each finding and writes them, 1,000 to a transaction. "
        "Two changes took the cold full re-read from 194 MB/s (0.35 of a 540 MB/s disk, the "
        "figure published before) to the 568 MB/s above, and the first read from 80 to 260 "
        "MB/s, on the same 10,000 files. (1) A read of a cold 26 KiB file is mostly waiting "
        "for the disk: an unthrottled read now opens a request's files and asks the kernel for "
        "all of them (`POSIX_FADV_WILLNEED`) before reading the first, so the disk serves them "
        "at once and each read finds its bytes in memory; alone, on one thread, that read the "
        "set at 472-681 MB/s against 215-228 MB/s one file after another, at less CPU (the "
        "kernel's share halved). (2) The checks ran in one interpreter, which was CPU-bound on "
        "one of the two cores; they now run in two reader processes (the standard library "
        "alone, one JSON line each way), and the scrub's process keeps the database work. The "
        "CPU per MB, readers included, went from 6.6-7.8 ms to 2.7-3.1 ms. The first read "
        "parses each checkpoint's lines as one JSON array (one parser call, about 90 µs "
        "against 150 µs a checkpoint); it stays the slower cycle, and happens once a "
        "checkpoint. Why the goal is missed here: the disk probe now reads 2.1-2.6 GB/s (it "
        "read 0.3-1.0 GB/s in earlier runs on this host: the virtual disk is served from the "
        "host's cache, which the guest cannot drop), and the bare floor, the same files read "
        "with nothing but open, `POSIX_FADV_WILLNEED`, one read and sha256 in two processes "
        "and no database, reads 1.07-1.30 GB/s, 0.41-0.54 of the disk; with four processes and "
        "256 files to a request it reached 1.11-1.18 GB/s, 0.45-0.57. So 0.5 of this disk is "
        "at the edge of what Python does on these two cores while doing nothing else; the "
        "scrub, which also judges each file and records it in the database, reads at 0.46-0.60 "
        "of that floor. 568 MB/s is more than the whole sequential rate the probe measured in "
        "the earlier runs on this host (421-540 MB/s). More reader processes did not help (three read less than two: "
        "the two cores are then shared by four busy processes). The nothing-changed cycle is "
        "one `stat` and one tuple of a keyset batch per checkpoint, nothing written and no "
        "reader process started, each batch served from `idx_mdr_scrub_walk` in id order: "
        "6.4-7.6 µs a checkpoint at 10,000 and 6.6 µs at 40,000 (flat, so the linear "
        "extrapolation to 1M holds); without the index it was 14.6 µs at 10,000 and 35 µs at "
        "40,000, growing with the ledger."
    ),
}
LIMIT_TITLES = {
    "fsync": "fsync floor",
    "durable": "Durable writes against the raw floor",
    "cpu": "CPU per write",
    "suite": "Test suite",
    "pages": "Console pages at scale",
    "writes_before": "Write rates against the code before the counts",
    "bulk": "Bulk API",
    "concurrent": "Concurrent API writers",
    "put": "Single `PUT /api/v1/receipts`",
    "mirror": "Mirror",
    "mirror_fleet": "Mirror, many gateways",
    "reads": "Coverage lookup and list by status",
    "requeue": "Requeue plans",
    "api": "Receipts API under load",
    "fleet": "Fleet view and one gateway's receipts pages",
    "embedded_broker": "Embedded broker",
    "scrub": "Checkpoint scrub",
}

REPRODUCE = [
    "Every command runs from the repository root with the project venv; PostgreSQL and Redis on "
    "127.0.0.1 (`DATABASE_URL`, `CELERY_BROKER_URL`) where a figure needs them, and the "
    "reference opensquilla 0.3.0 venv from `bash bench/reference_venv.sh` "
    "(`var/bench/ref-venv`). Each benchmark writes `var/bench/<name>.json`; to put a run on "
    "this page, keep it and regenerate:",
    "",
    "```",
    ".venv/bin/python bench/report.py --adopt var/bench/<name>.json   # copies it to "
    "bench/results/, rewrites this page",
    ".venv/bin/python bench/report.py --check                         # this page = the JSON?",
    "```",
    "",
    "The write figures (`make bench-writes` runs these three, then adopts them):",
    "",
    "```",
    ".venv/bin/python bench/write_rounds.py --backend sqlite --sqlite-sync FULL --rounds 5 "
    "--n 1000 --name write_rounds_sqlite_full",
    ".venv/bin/python bench/write_rounds.py --backend sqlite --sqlite-sync OFF --rounds 5 "
    "--n 1000 --name write_rounds_sqlite_off",
    ".venv/bin/python bench/write_rounds.py --backend postgres --rounds 5 --n 1000 "
    "--sides fsync,after,raw --name write_rounds_postgres_on",
    "```",
    "",
    "The suite's time: `bench/suite_time.py --name <name> -- <pytest command> [-- <second "
    "pass>]`, e.g. the two passes of `make pytest`. The figures marked *(carried)* come from "
    "`bench/scale.py`, `bench/bulk_api.py`, `bench/concurrent_writers.py`, `bench/mirror.py`, "
    "`bench/ledger_ops.py`, `bench/workers.py` and `bench/api_load.py` (`make bench` runs the "
    "set through `bench/run_all.py`); their JSON was not kept, so those rows hold the figures "
    "as last published, with the command, date and commit of their run "
    "(`bench/results/carried.json`). This page renders only write-round, suite-time, "
    "mirror-fleet (`bench/mirror_fleet.py`) and carried "
    "results (and `bench/write_profile.py`'s, `bench/fleet_view.py`'s and "
    "`bench/embedded_broker.py`'s): adopting the JSON "
    "of another benchmark is refused until the report has a renderer for it.",
    "",
    "Every benchmark also runs in the test suite at a tiny size, so one that stops running "
    "fails `make test`: `tests/bench/test_bench_smoke.py` (one entry per `bench/*.py`; "
    "`.venv/bin/pytest -m bench` runs them alone). Those that need PostgreSQL, Redis or the "
    "reference venv carry the `postgres`, `redis` or `reference` marker and skip without it "
    "(CI may not skip).",
]

INDEX_AUDIT = """## Index audit

Every index on the receipts table names what needs it (migration 0009 and later); each one
costs every write its entry.

| index | kept for |
|---|---|
| primary key `id` | keyset paging tie-break, joins |
| `receipt_id` unique | receipt page, update, claim, requeue by id |
| `receipt_idempotency_key_uniq` | the upsert's conflict target |
| `idx_mdr_session` (session_key, status, created_at) | the upstream list by session and status; on SQLite without statistics, dropping it made the planner serve the coverage lookup from `idx_mdr_status_created` (125 ms per lookup at 100k rows, measured), so it stays |
| `idx_mdr_coverage` | the checkpoint's exact coverage lookup, session pages, purge |
| `idx_mdr_status_created` | status tabs `?status=` |
| `idx_mdr_created` | unfiltered list, API list, overview timeline |
| `idx_mdr_agent_status` | `?agent=&status=`, health's oldest-queued probe |
| `idx_mdr_agent_created` | `?agent=`, health's per-agent window |
| `idx_mdr_agent_scope_status` | `?agent=&scope=(&status=)` |
| `idx_mdr_repair_queue` (partial: repair-queue rows only) | the repair worker's queue |
| `idx_mdr_source_path`, `idx_mdr_target_path` | legacy-archive import's "already recorded?" check, repair by path (an OR of two columns: one index each) |
| `idx_mdr_reason_trgm` (PostgreSQL) | `?reason=` contains |
| `idx_mdr_repair_due` (partial: repair-queue rows only) | oldest due repair per agent for `/metrics`, alerts and liveness: one probe per agent |
| `idx_mdr_unsafe_found` (gateway, agent, status, updated_at; partial: `checkpoint_missing` and `hash_mismatch` rows only) | since when a checkpoint the scrub found unsafe has been at risk (the write that moved it, not when it was saved) for time at risk, `/metrics` and the at-risk-age alert: one probe per (gateway, agent, status) |
| `idx_mdr_hash_mismatch` (partial: rows matching health's hash-mismatch heuristic, normally none) | the match probe of the overview, the agent page, the fleet, `/metrics` and the alerts (`health.verdicts`): one read names the (gateway, agent) pairs with anything to find; windows are read for those only |
| `idx_mdr_scrub_walk` (gateway, id; partial: checkpoint rows only) | the checkpoint scrub's keyset walk: a batch of 1,000 reads 1,000 index entries; without it SQLite read every receipt of the gateway after the cursor and sorted them, per batch (a cycle grew with the square of the ledger) |
| events: `idx_event_receipt` (receipt_id, created_at, id) | a receipt's trail; its prefix serves every lookup by receipt_id |
| events: `idx_event_plan` (partial: `plan_id IS NOT NULL`) | the audit log's plan filter, a plan's follow-up tally |
"""


# --- the page ------------------------------------------------------------------------------------


def render(results: dict[str, dict] | None = None) -> str:
    results = load_results() if results is None else results
    write_rows, write_detail = write_figures(by_kind(results, "write_rounds"))
    suite_rows, suite_detail = suite_figures(by_kind(results, "suite_time"))
    fleet_rows, fleet_detail = fleet_figures(by_kind(results, "fleet_view"))
    mirror_fleet_rows, mirror_fleet_detail = mirror_fleet_figures(by_kind(results, "mirror_fleet"))
    broker_rows = embedded_broker_figures(by_kind(results, "embedded_broker"))
    scrub_rows, scrub_detail = scrub_figures(by_kind(results, "scrub"))
    rows = (
        write_rows
        + suite_rows
        + fleet_rows
        + mirror_fleet_rows
        + broker_rows
        + scrub_rows
        + carried_figures(results)
    )
    machine = next(
        (r["machine"] for r in results.values() if r.get("machine")),
        {"cpu": "?", "nproc": "?", "memory_gib": "?", "python": "?"},
    )
    out = [
        "# Performance",
        "",
        "Generated by `bench/report.py` from the JSON in `bench/results/`: do not edit by hand. "
        "`.venv/bin/python bench/report.py` rewrites it, and the test suite fails when this page "
        "and the JSON disagree (`bench/report.py --check`). Each figure names the command that "
        "made it, when and on which commit, and the 1-minute load average of the machine at the "
        f"time: a shared VM with {machine['nproc']} cores ({machine['cpu']}, "
        f"{machine['memory_gib']} GiB; Python {machine['python']}), so read absolute rates with "
        "their load; the ratios between sides measured in the same interleaved rounds are the "
        "comparable part. Earlier figures and how they moved are in this file's git history.",
        "",
        "## Current figures",
        "",
        "| figure | value: median [min–max] | goal | met | measured (UTC, commit; load) | command |",
        "|---|---|---|---|---|---|",
    ]
    out += [
        f"| {r['figure']} | {r['value']} | {r['goal']} | {r['met']} | {r['measured']} | "
        f"{r['command']} |"
        for r in rows
    ]
    out += [
        "",
        "*(carried)*: not re-measured by a run whose JSON is in `bench/results/`; the figure as "
        "last published (its run's JSON was not kept).",
        "",
        "## Writes against the disk's limit",
        "",
        "Sides: **fsync**, the disk's commit floor; **raw floor**, the very statements "
        "`receipts_app.ledger` runs (`receipts_app/ledger/fastsql.py`), prepared, on the raw "
        "driver, one commit per write, every parameter built before the clock starts; **ours**, "
        "`receipts_app.ledger` itself; **reference**, opensquilla 0.3.0's `SessionStorage` on its "
        "own SQLite schema. Every side writes a fresh copy of its database in its own process; "
        "each round runs every side once, in rotating order. CPU is the writing process's CPU "
        "time (`time.process_time`, all threads) per write: SQLite executes inside that process; "
        "PostgreSQL's server does not, so on PostgreSQL it is the client's share only.",
        "",
        *write_detail,
        *profile_detail(by_kind(results, "write_profile")),
        "## Test suite",
        "",
        "`make pytest` runs the suite in two passes: everything but the browser tests with "
        "pytest-xdist (`-n 2 --dist loadgroup`: one test database per worker; the tests that "
        "start real Celery workers or soak loads share one xdist group), then the browser tests "
        "serially. CI (`.ci/run`) runs that on PostgreSQL + Redis + Chromium, then the suite again "
        "on SQLite and the embedded SQLite broker (`-n 2`, PostgreSQL-, Redis- and browser-marked "
        "tests deselected). `-n auto` is `-n 2` on this 2-core machine.",
        "",
        *suite_detail,
        *(
            [
                "## Mirror, many gateways",
                "",
                "`bench/mirror_fleet.py`: each gateway a `sessions.db` written live by the "
                "reference opensquilla 0.3.0 (`tests/mirror/reference_writer.py load`), all "
                "followed at once into one PostgreSQL. Lag: a receipt's commit (its writer's "
                "clock) to its row in our ledger under its gateway, seen by polling every "
                "20 ms. Idle: each follower's CPU (`/proc/<pid>/stat`) once the writers stop.",
                "",
                *mirror_fleet_detail,
            ]
            if mirror_fleet_detail
            else []
        ),
        *(
            [
                "## Checkpoint scrub",
                "",
                "`bench/scrub.py`: real checkpoint JSONL files with their `checkpoint_saved` "
                "receipts, verified by `receipts_app.scrub.scrub_checkpoints` in this process "
                "and its reader processes, unthrottled; the files are dropped from the page cache "
                "(`posix_fadvise(DONTNEED)`) before each full cycle.",
                "",
                *scrub_detail,
            ]
            if scrub_detail
            else []
        ),
        *(
            [
                "## Fleet view at scale",
                "",
                "`bench/fleet_view.py`: receipts generated by PostgreSQL itself "
                "(`generate_series`, through the count and failure-inbox triggers), spread "
                "evenly over 10 gateways each followed by a mirror source; the beat task's "
                "fold and `ANALYZE` once after seeding; each page timed in this process "
                "(Django's test `Client`, a logged-in admin) after a warm-up request, and its "
                "queries counted with `CaptureQueriesContext`.",
                "",
                *fleet_detail,
            ]
            if fleet_detail
            else []
        ),
        "## How to reproduce",
        "",
        *REPRODUCE,
        "",
        "## What limits each figure",
        "",
    ]
    for key in dict.fromkeys(r["limit"] for r in rows):
        out += [f"### {LIMIT_TITLES[key]}", "", LIMITS[key], ""]
    out += [INDEX_AUDIT]
    return "\n".join(out).rstrip() + "\n"


# --- adopting results ----------------------------------------------------------------------------

RENDERED_KINDS = (
    "write_rounds",
    "suite_time",
    "write_profile",
    "fleet_view",
    "mirror_fleet",
    "embedded_broker",
    "scrub",
)


def adopt(path: Path) -> Path:
    data = json.loads(path.read_text())
    if data.get("kind") not in RENDERED_KINDS:
        sys.exit(
            f"{path}: kind {data.get('kind')!r} has no renderer in bench/report.py "
            f"(renders {', '.join(RENDERED_KINDS)}); not adopted"
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    target = RESULTS / path.name
    shutil.copyfile(path, target)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page has drifted")
    parser.add_argument("--adopt", nargs="*", default=[], type=Path, metavar="JSON")
    args = parser.parse_args()
    page = None
    if args.check:
        page = render()
        current = DOC.read_text() if DOC.exists() else ""
        if current != page:
            diff = difflib.unified_diff(
                current.splitlines(), page.splitlines(), "docs/PERFORMANCE.md", "generated", n=1
            )
            print("\n".join(list(diff)[:80]))
            sys.exit(
                "docs/PERFORMANCE.md differs from bench/report.py's output: run bench/report.py"
            )
        print("docs/PERFORMANCE.md matches bench/results/")
        return
    for path in args.adopt:
        print(f"adopted {adopt(path)}")
    DOC.write_text(page or render())
    print(f"wrote {DOC}")


if __name__ == "__main__":
    main()
