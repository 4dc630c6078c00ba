"""Run every benchmark in order; each writes its JSON result to var/bench/<name>.json.

    .venv/bin/python bench/run_all.py            # the full set (make bench)
    .venv/bin/python bench/run_all.py --quick    # smoke sizes
    .venv/bin/python bench/run_all.py --only scale,workers

A benchmark that fails is reported as such; the others still run, and the run exits 1. docs/PERFORMANCE.md is
rendered by bench/report.py from the results kept in bench/results/ (``--adopt``), not from
whatever ran last.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload as wl  # noqa: E402

# The scale run also re-times the pages after VACUUM and with the proposed index.
EXTRA_ARGS = {
    "scale": ["--vacuum", "--try-index"],
    "api_load_conn60": ["--conn-max-age", "60"],
}
# Runs that reuse another benchmark's script with different arguments.
SCRIPT = {"api_load_conn60": "api_load"}
BENCHES = (
    "ledger_ops",
    "bulk_api",
    "scale",
    "workers",
    "api_load",
    "api_load_conn60",
    "prototype_ledger",
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=",".join(BENCHES))
    args = parser.parse_args()
    status_path = wl.RESULTS_DIR / "run_all.json"
    runs: dict = json.loads(status_path.read_text()) if status_path.exists() else {}
    logs = wl.RESULTS_DIR / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for name in [n for n in args.only.split(",") if n]:
        cmd = [
            sys.executable,
            f"bench/{SCRIPT.get(name, name)}.py",
            *(["--quick"] if args.quick else []),
            *EXTRA_ARGS.get(name, []),
        ]
        print(f"== {' '.join(cmd)}", flush=True)
        s = time.perf_counter()
        with open(logs / f"{name}.out", "w") as out:
            proc = subprocess.Popen(
                cmd, cwd=wl.ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if (
                    "ratelimit" not in line
                    and "System check" not in line
                    and line.strip() != "WARNINGS:"
                ):
                    print(line, end="", flush=True)
            rc = proc.wait()
        runs[name] = {
            "command": " ".join(cmd).replace(sys.executable, ".venv/bin/python"),
            "exit_code": rc,
            "elapsed_s": round(time.perf_counter() - s, 1),
            "quick": args.quick,
            "at": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        }
        status_path.write_text(json.dumps(runs, indent=2) + "\n")
    print(
        "results in var/bench/; put a run on docs/PERFORMANCE.md with "
        "bench/report.py --adopt var/bench/<name>.json"
    )
    failed = [name for name, run in runs.items() if run["exit_code"] != 0 and name in args.only]
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
