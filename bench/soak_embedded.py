"""Soak the embedded default: web, worker, beat and mirror under load, each killed -9 once.

    python bench/soak_embedded.py [--minutes 30] [--rate 1.0] [--drain-minutes 10]
    make soak-embedded                       # the same, 30 minutes

The stack is the Procfile's, started by honcho as ``make run`` starts it (SQLite and the
SQLite broker in a fresh folder under var/, nothing shared with a developer's run). A client
loop creates a session with a two-message transcript per iteration, then alternately asks for
a checkpoint (``202`` + task id) or writes a ``checkpoint_failed`` receipt and requeues it;
each step retries what the web server could not answer (with an Idempotency-Key, so a retry
never does it twice). A second client reads ``/healthz`` five times a second. Through the run
each of web, worker, beat and mirror is killed with SIGKILL once, spread over the run; the
worker while it holds checkpoints it has taken from the broker (``kill_worker_holding_work``),
so only the outbox can bring them back, after the checkpoint's hard limit + 60 s and the next
repair tick: keep ``--drain-minutes`` above 5.

After the load, it waits (up to ``--drain-minutes``) until every accepted piece of work is done
and prints: work accepted, work lost (accepted, never done), each process's restarts, and the
web's gaps (``Answers``: a gap is a run of ``/healthz`` probes that failed or waited more than
1 s). Web is killed twice: one gunicorn master (with requests in flight) and one gunicorn worker
(between requests: see ``Gate``). The figures go to ``<root>/result.json`` (and ``--save``).
Exit status 1 when anything was lost or web had a gap.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PROCESSES = ("web", "worker", "beat", "mirror")
API = "/api/v1"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Stack:
    """The Procfile's processes under honcho, on their own var/ folder and port."""

    def __init__(self, root: Path, *, port: int | None = None) -> None:
        self.root = root
        self.var = root / "var"
        self.port = port or _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / "stack.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.token = ""

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        for name in ("DATABASE_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND", "CACHE_URL"):
            env.pop(name, None)  # the embedded default, whatever this shell points at
        env.pop("CELERY_TASK_ALWAYS_EAGER", None)
        env.update(
            {
                "OPENSQUILLA_ENV_FILE": "",
                "OPENSQUILLA_VAR_DIR": str(self.var),
                "OPENSQUILLA_CHECKPOINT_WORKSPACE": str(self.root / "workspace"),
                "OPENSQUILLA_MEMORY_WORKSPACE": str(self.root / "workspace"),
                "WEB_BIND": f"127.0.0.1:{self.port}",
                "WEB_WORKERS": env.get("WEB_WORKERS", "2"),
                "WORKER_CONCURRENCY": env.get("WORKER_CONCURRENCY", "2"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        return done.stdout

    def prepare(self) -> None:
        (self.root / "workspace").mkdir(parents=True, exist_ok=True)
        self.manage("migrate", "--noinput", "--verbosity", "0")
        self.manage("bootstrap_operator")
        self.token = (
            self.manage(
                "create_api_token", "--user", "admin", "--name", "soak", "--scope", "operate"
            )
            .strip()
            .splitlines()[-1]
        )

    def start(self) -> None:
        # The repository's Procfile, run with this interpreter's virtualenv.
        procfile = self.root / "Procfile"
        procfile.write_text(
            (REPO / "Procfile").read_text().replace(".venv/bin/", f"{BIN}/"), encoding="utf-8"
        )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(  # noqa: S603 - our own venv's honcho
                [str(BIN / "honcho"), "start", "-f", str(procfile), "-d", str(REPO)],
                cwd=REPO,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def status(self, name: str) -> dict[str, object]:
        try:
            return dict(json.loads((self.var / "run" / "processes" / f"{name}.json").read_text()))
        except (OSError, ValueError):
            return {}

    def running(self, name: str) -> bool:
        return self.status(name).get("state") == "running"

    def answers(self) -> bool:
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def worker_ready(self) -> bool:
        return " ready." in self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise RuntimeError(f"the stack exited:\n{self.log_tail()}")
            if all(self.running(n) for n in PROCESSES) and self.answers() and self.worker_ready():
                return
            time.sleep(0.5)
        raise RuntimeError(f"the stack did not come up:\n{self.log_tail()}")

    def kill(self, name: str) -> int:
        """SIGKILL the process itself (not its supervisor): a crash, the OOM killer."""
        pid = self.status(name).get("pid")
        if not isinstance(pid, int):
            raise RuntimeError(f"{name} is not running: {self.status(name)}")
        os.kill(pid, signal.SIGKILL)
        return pid

    def restarts(self) -> dict[str, int]:
        return {name: int(str(self.status(name).get("restarts") or 0)) for name in PROCESSES}

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> int | None:
        """Ctrl-C, as a person stops ``make run``; SIGKILL what is still there after a minute."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)
            return None

    def database(self) -> sqlite3.Connection:
        return sqlite3.connect(self.var / "opensquilla.sqlite3", timeout=30)


# A probe request answered later than this (or not at all) is part of a gap.
LATE_SECONDS = 1.0


class Gate:
    """Lets the killer act between requests: ``request()`` around each request, and
    ``between_requests()`` waits until none is in flight and holds new ones back meanwhile.
    Used only for the kill of a gunicorn *worker*, whose in-flight request dies with it (a
    connection reset no server can avoid); the master and every other process are killed
    with requests in flight."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        with self._cond:
            while self._closed:
                self._cond.wait()
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def between_requests(self) -> Iterator[None]:
        with self._cond:
            self._closed = True
            while self._in_flight:
                self._cond.wait()
        try:
            yield
        finally:
            with self._cond:
                self._closed = False
                self._cond.notify_all()


@dataclass
class Answers:
    """What the web server answered, and its gaps.

    The probe (``watch``) sends ``GET /healthz`` every 0.2 s with a 15 s timeout. A probe is
    *late* when it failed (refused, reset, timed out, not 200) or was answered after more than
    ``LATE_SECONDS``. A *gap* is a run of consecutive late probes; its length runs from the send
    of its first late probe to the answer of the next probe answered in time. So "0 gaps"
    means every probe over the whole run, restarts included, was answered with 200 within 1 s.
    The load's own requests count separately: failed (no HTTP answer) and 5xx answers.
    """

    probes: int = 0
    late: int = 0
    failed_probes: int = 0
    slowest: float = 0.0
    gaps: int = 0
    longest_gap: float = 0.0
    gap_started: float | None = None
    load_requests: int = 0
    failures: int = 0  # load requests without an HTTP answer
    errors: int = 0  # load requests answered 5xx
    lock: threading.Lock = field(default_factory=threading.Lock)
    gate: Gate = field(default_factory=Gate)

    def probe(self, sent: float, answered: float, ok: bool) -> None:
        with self.lock:
            self.probes += 1
            waited = answered - sent
            if ok:
                self.slowest = max(self.slowest, waited)
            if ok and waited <= LATE_SECONDS:
                if self.gap_started is not None:
                    self.longest_gap = max(self.longest_gap, answered - self.gap_started)
                    self.gap_started = None
                return
            self.late += 1
            self.failed_probes += 0 if ok else 1
            if self.gap_started is None:
                self.gap_started = sent
                self.gaps += 1

    def finish(self) -> None:
        with self.lock:  # a gap still open when the run ends lasts until now
            if self.gap_started is not None:
                self.longest_gap = max(self.longest_gap, time.monotonic() - self.gap_started)
                self.gap_started = None

    def answered(self, status: int) -> None:
        with self.lock:
            self.load_requests += 1
            self.errors += 1 if status >= 500 else 0

    def failed(self) -> None:
        with self.lock:
            self.load_requests += 1
            self.failures += 1


@dataclass
class Accepted:
    checkpoint_sessions: list[str] = field(default_factory=list)
    requeued_receipts: list[str] = field(default_factory=list)
    refused: int = 0


class Client:
    def __init__(self, stack: Stack, answers: Answers) -> None:
        self.http = httpx.Client(
            base_url=stack.url + API,
            headers={"Authorization": f"Bearer {stack.token}"},
            timeout=15,
        )
        self.answers = answers

    def call(self, method: str, path: str, body: object, key: str, ok: tuple[int, ...]) -> dict:
        """One step, retried while the web server cannot answer (at most ~60 s)."""
        for _attempt in range(120):
            try:
                with self.answers.gate.request():
                    response = self.http.request(
                        method, path, json=body, headers={"Idempotency-Key": key}
                    )
            except httpx.HTTPError:
                self.answers.failed()
                time.sleep(0.5)
                continue
            self.answers.answered(response.status_code)
            if response.status_code in ok:
                return dict(response.json()) if response.content else {}
            if response.status_code >= 500 or response.status_code == 409:
                # 409 idempotency_in_progress: the first try is still running; ask again.
                time.sleep(0.5)
                continue
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        raise TimeoutError(f"{method} {path}: no answer")


def load(stack: Stack, answers: Answers, accepted: Accepted, stop: threading.Event, rate: float):
    client = Client(stack, answers)
    run = uuid.uuid4().hex[:6]
    i = 0
    while not stop.is_set():
        started = time.monotonic()
        key = f"agent:main:webchat:soak-{run}-{i}"
        try:
            session = client.call(
                "POST", "/sessions", {"session_key": key}, f"{key}:create", (201,)
            )
            for n, role in enumerate(("user", "assistant")):
                message = {"role": role, "content": f"soak message {n} of {key}"}
                client.call("POST", f"/sessions/{key}/messages", message, f"{key}:m{n}", (201,))
            if i % 2 == 0:
                client.call(
                    "POST",
                    f"/sessions/{key}/checkpoints",
                    {"turn_id": f"t{i}"},
                    f"{key}:ck",
                    (202,),
                )
                accepted.checkpoint_sessions.append(key)
            else:
                failed = {
                    "session_key": key,
                    "session_id": session["session_id"],
                    "scope": "checkpoint",
                    "status": "checkpoint_failed",
                    "reason": "soak: disk full",
                    "idempotency_key": f"{key}:failed",
                    "coverage_entry_count": 2,
                }
                row = client.call("PUT", "/receipts", failed, f"{key}:put", (200,))
                result = client.call(
                    "POST",
                    f"/receipts/{row['receipt_id']}/requeue",
                    {"reason": "soak"},
                    f"{key}:rq",
                    (200,),
                )
                if result.get("outcome") != "requeued":
                    raise RuntimeError(f"requeue answered {result}")
                accepted.requeued_receipts.append(row["receipt_id"])
        except (RuntimeError, TimeoutError) as exc:
            accepted.refused += 1
            print(f"  step refused: {exc}", flush=True)
        i += 1
        stop.wait(max(0.0, 1 / rate - (time.monotonic() - started)))


def kill_worker_holding_work(stack: Stack, answers: Answers, accepted: Accepted, n: int = 8):
    """Kill the worker while it holds checkpoints it has taken from the broker.

    The worker is paused (SIGSTOP) while eight checkpoints are accepted, so they wait in the
    broker; the ledger's write lock is taken so the tasks it then takes cannot finish; it is
    resumed, takes what it may, and is killed with its pool (SIGKILL to its process group).
    The broker no longer has those messages: only the outbox brings them back.
    """
    pid = int(str(stack.status("worker")["pid"]))
    keys = [f"agent:main:webchat:soak-held-{uuid.uuid4().hex[:8]}" for _ in range(n)]
    client = Client(stack, answers)
    for key in keys:
        client.call("POST", "/sessions", {"session_key": key}, f"{key}:create", (201,))
        for index, role in enumerate(("user", "assistant")):
            message = {"role": role, "content": f"held message {index} of {key}"}
            client.call("POST", f"/sessions/{key}/messages", message, f"{key}:m{index}", (201,))
    os.kill(pid, signal.SIGSTOP)
    try:
        for key in keys:
            client.call("POST", f"/sessions/{key}/checkpoints", {}, f"{key}:ck", (202,))
            accepted.checkpoint_sessions.append(key)
        with stack.database() as db:
            db.execute("BEGIN IMMEDIATE")  # held: the tasks it takes now block on their write
            os.kill(pid, signal.SIGCONT)
            time.sleep(3)
            os.killpg(pid, signal.SIGKILL)
            db.rollback()
    finally:
        if _alive(pid):  # something failed before the kill: never leave it paused
            os.kill(pid, signal.SIGCONT)
    return pid


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def watch(stack: Stack, answers: Answers, stop: threading.Event) -> None:
    # The load client's timeout: a request waiting while web restarts is answered, late.
    with httpx.Client(timeout=15) as http:
        while not stop.is_set():
            with answers.gate.request():
                sent = time.monotonic()
                try:
                    ok = http.get(f"{stack.url}/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                answers.probe(sent, time.monotonic(), ok)
            stop.wait(0.2)


def web_workers(stack: Stack) -> list[int]:
    """The gunicorn workers of every web instance (the masters' children)."""
    status = stack.status("web")
    instances = status.get("instances")
    records = [i for i in instances if isinstance(i, dict)] if isinstance(instances, list) else []
    masters = [int(str(i["pid"])) for i in records if i.get("pid")] or [int(str(status["pid"]))]
    children: list[int] = []
    for master in masters:
        try:
            text = Path(f"/proc/{master}/task/{master}/children").read_text()
        except OSError:
            continue
        children += [int(pid) for pid in text.split()]
    return children


def kill_web_worker(stack: Stack, answers: Answers) -> int:
    """SIGKILL one gunicorn worker between two requests (see ``Gate``); its master forks a
    new one while the other workers answer."""
    workers = web_workers(stack)
    if not workers:
        raise RuntimeError("no gunicorn worker found")
    with answers.gate.between_requests():
        os.kill(workers[0], signal.SIGKILL)
    return workers[0]


def pending(stack: Stack, accepted: Accepted) -> tuple[list[str], list[str]]:
    """Accepted work not done yet: checkpoints with no receipt, requeues still requeued."""
    with stack.database() as db:
        table = "receipts_app_memorydurablereceipt"
        done_sessions = {
            key
            for (key,) in db.execute(
                f"SELECT DISTINCT session_key FROM {table} WHERE scope = 'checkpoint' "  # noqa: S608
                "AND status IN ('checkpoint_saved', 'checkpoint_failed')"
            )
        }
        still_requeued = {
            rid
            for (rid,) in db.execute(
                f"SELECT receipt_id FROM {table} WHERE status = 'checkpoint_requeued'"  # noqa: S608
            )
        }
    return (
        [k for k in list(accepted.checkpoint_sessions) if k not in done_sessions],
        [r for r in list(accepted.requeued_receipts) if r in still_requeued],
    )


def soak(
    minutes: float,
    rate: float,
    drain_minutes: float,
    root: Path,
    save: Path | None = None,
    *,
    kills: bool = True,
) -> int:
    stack = Stack(root)
    print(f"soak: {minutes:g} min at {rate:g} iterations/s, stack in {root}", flush=True)
    stack.prepare()
    stack.start()
    answers = Answers()
    accepted = Accepted()
    try:
        stack.wait_ready()
        print(f"soak: stack up at {stack.url}", flush=True)
        stop = threading.Event()
        threads = [
            threading.Thread(target=load, args=(stack, answers, accepted, stop, rate), daemon=True),
            threading.Thread(target=watch, args=(stack, answers, stop), daemon=True),
        ]
        for thread in threads:
            thread.start()
        started = time.monotonic()
        duration = minutes * 60
        # Each process killed once, spread over the run (the worker first: its lost work
        # needs the longest to come back); web twice: one gunicorn master (the process the
        # supervisor runs, what a crash or the OOM killer ends) and, later, one gunicorn worker.
        names = ("worker", "beat", "mirror", "web", "web worker")
        # Without kills (--no-kills: the suite's smoke run, too short for lost work to come
        # back), only the load.
        schedule = dict(zip(names, (0.15, 0.3, 0.45, 0.6, 0.8), strict=True)) if kills else {}
        killed: dict[str, float] = {}
        web_workers_before = 0
        while time.monotonic() - started < duration:
            elapsed = time.monotonic() - started
            for name, at in schedule.items():
                if name not in killed and elapsed >= at * duration:
                    if not stack.running(name.split()[0]):
                        continue  # still coming back from an earlier kill: wait for it
                    if name == "worker":
                        pid = kill_worker_holding_work(stack, answers, accepted)
                    elif name == "web worker":
                        web_workers_before = len(web_workers(stack))
                        pid = kill_web_worker(stack, answers)
                    else:
                        pid = stack.kill(name)
                    killed[name] = elapsed
                    print(f"soak: {elapsed:6.0f} s  kill -9 {name} (pid {pid})", flush=True)
            if stack.process is not None and stack.process.poll() is not None:
                print("soak: the stack itself exited", flush=True)
                break
            time.sleep(0.5)
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
        answers.finish()
        web_workers_after = len(web_workers(stack))
        print(
            f"soak: load stopped; {len(accepted.checkpoint_sessions)} checkpoints and "
            f"{len(accepted.requeued_receipts)} requeues accepted; waiting for them",
            flush=True,
        )
        drain_started = time.monotonic()
        while True:
            checkpoints, requeues = pending(stack, accepted)
            if not checkpoints and not requeues:
                break
            if time.monotonic() - drain_started > drain_minutes * 60:
                break
            time.sleep(5)
        drained = time.monotonic() - drain_started
        restarts = stack.restarts()
        resent = stack.log_path.read_text(errors="replace").count(" again (send ")
    finally:
        stop_code = stack.stop()
    lost = len(checkpoints) + len(requeues)
    print()
    print(
        f"work accepted       {len(accepted.checkpoint_sessions)} checkpoints, "
        f"{len(accepted.requeued_receipts)} requeues ({accepted.refused} steps refused)"
    )
    print(
        f"messages lost       {lost} (checkpoints {len(checkpoints)}, requeues {len(requeues)})"
        f"; all done {drained:.0f} s after the load stopped"
    )
    print(f"sent again          {resent} (by the outbox sweep, after a kill or a failed publish)")
    print(f"processes killed    {', '.join(f'{n} at {t:.0f} s' for n, t in killed.items())}")
    print(
        f"processes restarted {sum(restarts.values())} "
        f"({', '.join(f'{n} {c}' for n, c in restarts.items())})"
    )
    print(
        f"web worker          {web_workers_before} gunicorn workers before its kill, "
        f"{web_workers_after} after (forked again by its master)"
    )
    print(
        f"probe requests      {answers.probes} (GET /healthz every 0.2 s): {answers.late} late "
        f"(> {LATE_SECONDS:g} s or failed), {answers.failed_probes} failed; "
        f"slowest answer {answers.slowest:.2f} s"
    )
    print(
        f"web gaps            {answers.gaps} (runs of late probes); "
        f"longest web gap {answers.longest_gap:.1f} s"
    )
    print(
        f"load requests       {answers.load_requests}: {answers.failures} without an answer, "
        f"{answers.errors} answered 5xx (each retried with its Idempotency-Key)"
    )
    print(f"stopped with Ctrl-C exit {stop_code}")
    result = {
        "minutes": minutes,
        "rate": rate,
        "checkpoints_accepted": len(accepted.checkpoint_sessions),
        "requeues_accepted": len(accepted.requeued_receipts),
        "steps_refused": accepted.refused,
        "lost": lost,
        "drained_s": round(drained, 1),
        "sent_again": resent,
        "killed_at_s": {n: round(t) for n, t in killed.items()},
        "restarts": restarts,
        "web_workers_before_after": [web_workers_before, web_workers_after],
        "probes": answers.probes,
        "late_probes": answers.late,
        "failed_probes": answers.failed_probes,
        "slowest_probe_s": round(answers.slowest, 3),
        "gaps": answers.gaps,
        "longest_gap_s": round(answers.longest_gap, 2),
        "load_requests": answers.load_requests,
        "load_failed": answers.failures,
        "load_5xx": answers.errors,
        "stop_code": stop_code,
    }
    (root / "result.json").write_text(json.dumps(result, indent=2), encoding="utf-8")
    if save is not None:
        save.parent.mkdir(parents=True, exist_ok=True)
        save.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if lost:
        print(f"  lost checkpoints: {checkpoints[:10]}\n  lost requeues: {requeues[:10]}")
    return 1 if lost or answers.gaps else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="load duration (default 30)")
    parser.add_argument("--rate", type=float, default=1.0, help="iterations per second")
    parser.add_argument(
        "--drain-minutes",
        type=float,
        default=10.0,
        help="how long to wait for accepted work after the load (default 10)",
    )
    parser.add_argument("--root", type=Path, default=None, help="default: var/soak-<time>")
    parser.add_argument(
        "--save", type=Path, default=None, help="also write the figures (JSON) to this file"
    )
    parser.add_argument(
        "--no-kills", action="store_true", help="load only, no process killed (smoke runs)"
    )
    args = parser.parse_args()
    root = args.root or REPO / "var" / f"soak-{time.strftime('%Y%m%d-%H%M%S')}"
    root.mkdir(parents=True, exist_ok=True)
    return soak(
        args.minutes, args.rate, args.drain_minutes, root, args.save, kills=not args.no_kills
    )


if __name__ == "__main__":
    sys.exit(main())
