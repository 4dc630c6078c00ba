"""How long the test suite takes: one timed run of a pytest command, with the machine's load.

    .venv/bin/python bench/suite_time.py --name suite_sqlite_n2 -- \\
        .venv/bin/pytest -p no:cacheprovider -q -n 2 --dist loadgroup -m "not browser"

Runs the command after ``--`` in the current directory (environment as given: DATABASE_URL, CELERY_BROKER_URL,
OPENSQUILLA_REQUIRE_SERVICES …), records its wall time, exit code, pytest's closing counts
and the 1-minute load average before and after (the machine is shared: a figure without its
load says little), and writes ``var/bench/<name>.json``. Several commands may be given as
separate ``--`` groups; they run one after the other and count as one run (``make pytest``
is a parallel pass then a serial browser pass).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload as wl  # noqa: E402

COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|deselected|xfailed|xpassed)")
ENV_SHOWN = ("DATABASE_URL", "CELERY_BROKER_URL", "OPENSQUILLA_REQUIRE_SERVICES")


def run(command: list[str], log: Path) -> dict:
    started = time.perf_counter()
    with log.open("a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        rc = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT).returncode
    wall = time.perf_counter() - started
    tail = log.read_text(errors="replace").splitlines()[-3:]
    counts: dict[str, int] = {}
    for line in tail:
        if " in " in line and COUNTS.search(line):
            for n, what in COUNTS.findall(line):
                counts[what.rstrip("s") if what.startswith("error") else what] = int(n)
    return {
        "command": shlex.join(command),
        "exit_code": rc,
        "wall_s": round(wall, 1),
        "counts": counts,
    }


def main() -> None:
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("usage: bench/suite_time.py --name NAME -- COMMAND [-- COMMAND ...]")
    first = argv.index("--")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    args = parser.parse_args(argv[:first])
    commands: list[list[str]] = [[]]
    for word in argv[first + 1 :]:
        if word == "--":
            commands.append([])
        else:
            commands[-1].append(word)
    commands = [c for c in commands if c]
    log = wl.RESULTS_DIR / "logs" / f"{args.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    load_before = os.getloadavg()[0]
    tree = wl.git_commit(Path.cwd())  # at the start: what the suite runs
    passes = [run(command, log) for command in commands]
    result = {
        "kind": "suite_time",
        # the tree the suite ran in (the current directory), not this script's
        **tree,
        "tree": str(Path.cwd()),
        "passes": passes,
        "wall_s": round(sum(p["wall_s"] for p in passes), 1),
        # exit 5 (no test selected) of a pass counts as success only if the command says so
        "exit_code": max(p["exit_code"] for p in passes),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "env": {k: os.environ.get(k, "") for k in ENV_SHOWN},
        "machine": wl.machine_info(),
    }
    path = wl.write_result(args.name, result)
    print(f"{args.name}: {result['wall_s']} s, exit {result['exit_code']}, wrote {path}")


if __name__ == "__main__":
    main()
