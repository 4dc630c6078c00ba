"""Run one Procfile command so that a stop signal reaches only its main process, and restart
it when it dies on its own.

``python -m opensquilla_site.gentle_stop [--restart NAME [--instances N]] [--listen HOST:PORT]
<command> [args…]``

Stopping: honcho (``make run``) stops a process by signalling its whole process group, and
Ctrl-C in a terminal does the same to the foreground group. A Celery worker's prefork children
then die mid-task (the worker logs ``Process 'ForkPoolWorker-1' exited with 'signal 15
(SIGTERM)'`` as errors and restarts them) before its warm shutdown could stop them in order.
Here the command runs in its own process group, and SIGTERM, SIGINT or SIGHUP is passed to the
main process alone, as one SIGTERM: Celery's warm shutdown, gunicorn's graceful stop.

Restarting (``--restart NAME``): honcho stops every process as soon as one exits, so one
crashed worker would take the web server down with it. With ``--restart`` a command that exits
without being asked to is started again after a backoff (1 s, doubling to 30 s; back to 1 s
once it has run for a minute), and each restart is logged and written to
``<var>/run/processes/NAME.json``, which the liveness page reads. honcho only sees this
wrapper, which exits only when it is told to stop. Why not supervisord or circus: they replace
honcho and its Procfile, give up after a fixed number of fast failures (supervisord's
``startretries``), and keep their state where the console cannot read it; the wrapper that
already ran every process needed only this loop.

Listening (``--listen HOST:PORT``, the web server): the wrapper opens the listening socket
once and hands it to each start of the command as systemd socket activation does (file
descriptor 3, ``LISTEN_FDS=1``, ``LISTEN_PID``), which gunicorn reads instead of binding. The
socket outlives a crashed gunicorn, so while it restarts new connections wait in the backlog
instead of being refused.

Several instances (``--instances N``, the web server's ``WEB_INSTANCES``, default 2): the
wrapper runs N copies of the command, each restarted on its own (its own backoff) and all on
the one listening socket; each child gets ``OPENSQUILLA_INSTANCE`` (1…N) and
``OPENSQUILLA_INSTANCES``, from which ``gunicorn.conf.py`` takes its share of ``WEB_WORKERS``
and its own control socket. A gunicorn master killed with -9 leaves its workers to finish what
they hold (they exit once idle, when they see their parent gone) while the other instance's
workers keep accepting from the same socket: nothing waits for a boot. The status file then
holds the sum (``restarts``; ``state`` is ``running`` only while every instance runs; ``pid``
the first running instance's master) and each instance's own record under ``instances``.

Asked from outside (``manage.py process stop|start|restart NAME``, docs/OPERATIONS.md): the
command writes ``<var>/run/processes/NAME.request`` and the wrapper, which looks for it twice a
second, carries it out on this one process while the others keep running: ``restart`` stops
the command (SIGTERM, its warm shutdown) and starts it again at once; ``stop`` stops it and
keeps it stopped, the wrapper still running (honcho would stop every process if it exited),
until ``start``. Each carried-out request bumps ``requests_done`` in the status file, which is
how the command knows it was done.

Every start gets ``OPENSQUILLA_SUPERVISED_AS=NAME``: a process that writes its own heartbeat
(operations_app.pulse) reads its restarts from this file and carries them to the liveness page,
so the processes of an edge host show centrally too.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

_PR_SET_PDEATHSIG = 1
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
# A process that ran this long before it died starts again after the first backoff.
STABLE_AFTER_SECONDS = 60.0
STATUS_FOLDER = Path("run") / "processes"
# Set in every start of a supervised command: the name its status file has.
SUPERVISED_ENV = "OPENSQUILLA_SUPERVISED_AS"
REQUESTS = ("stop", "start", "restart")
REQUEST_POLL_SECONDS = 0.5
# systemd's first passed descriptor, where gunicorn looks for it.
_LISTEN_FD = 3
LISTEN_BACKLOG = 2048


def _die_with_parent() -> None:
    # If this wrapper is SIGKILLed, the command still gets its SIGTERM (Linux only).
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def listen(address: str) -> socket.socket:
    """Open the listening socket for ``HOST:PORT`` (``[::1]:8000`` for IPv6)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    family, kind, proto, _name, sockaddr = socket.getaddrinfo(
        host, int(port), type=socket.SOCK_STREAM
    )[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(sockaddr)
    sock.listen(LISTEN_BACKLOG)
    if sock.fileno() != _LISTEN_FD:
        # Kept at fd 3 here too, so every child finds it where it looks (pass_fds keeps it).
        os.dup2(sock.fileno(), _LISTEN_FD, inheritable=False)
        sock.close()
        sock = socket.socket(fileno=_LISTEN_FD)
    return sock


def _child_setup(
    listener: socket.socket | None, number: int = 1, count: int = 1, name: str | None = None
) -> Callable[[], None]:
    """The preexec_fn of each start: die with the wrapper; find the listener, if any; know
    which instance it is, when there are several, and under which name it is supervised."""

    def setup() -> None:
        _die_with_parent()
        if name:
            os.environ[SUPERVISED_ENV] = name
        if count > 1:
            # Read by gunicorn.conf.py: its share of WEB_WORKERS and its own control socket.
            os.environ["OPENSQUILLA_INSTANCE"] = str(number)
            os.environ["OPENSQUILLA_INSTANCES"] = str(count)
        if listener is not None:
            # In the child, before exec: the environment names fd 3 for this very process
            # (LISTEN_PID), as systemd's socket activation does.
            os.environ["LISTEN_FDS"] = "1"
            os.environ["LISTEN_PID"] = str(os.getpid())

    return setup


def status_dir() -> Path:
    """Where each supervised process's status file lives (settings' VAR_DIR, read plainly)."""
    default = Path(__file__).resolve().parent.parent / "var"
    return Path(os.environ.get("OPENSQUILLA_VAR_DIR") or default) / STATUS_FOLDER


def read_status(name: str, folder: Path | None = None) -> dict[str, object] | None:
    """The status file of ``name`` as last written, or None (none, or unreadable)."""
    path = (folder or status_dir()) / f"{name}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pid_alive(pid: object) -> bool:
    """Whether a process with this pid runs (signal 0; another user's process counts)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _supervisor_alive(data: dict[str, object]) -> bool:
    return pid_alive(data.get("supervisor_pid"))


class RequestError(Exception):
    """A stop/start/restart request that cannot be delivered (no such supervised process)."""


def send_request(
    name: str, action: str, *, folder: Path | None = None, timeout: float = 60.0
) -> dict[str, object]:
    """Ask the wrapper supervising ``name`` to ``stop``, ``start`` or ``restart`` it; wait
    until it says it was done (``requests_done`` moved) and return its status then.
    Raises RequestError when no running wrapper supervises ``name`` here, or it did not
    answer within ``timeout`` seconds."""
    if action not in REQUESTS:
        raise RequestError(f"unknown action {action!r}: one of {', '.join(REQUESTS)}")
    folder = folder or status_dir()
    before = read_status(name, folder)
    if before is None or not _supervisor_alive(before):
        known = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
        raise RequestError(
            f"no running supervisor of {name!r} on this host"
            + (f" (supervised here: {', '.join(known)})" if known else "")
            + "; processes are supervised by `make run` / `make run-edge`"
        )
    done = int(str(before.get("requests_done") or 0))
    path = folder / f"{name}.request"
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(action, encoding="utf-8")
    temporary.replace(path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = read_status(name, folder)
        if now is not None and int(str(now.get("requests_done") or 0)) > done:
            return now
        time.sleep(0.1)
    raise RequestError(
        f"the supervisor of {name!r} did not carry out {action!r} in {timeout:.0f} s"
    )


def _take_request(name: str) -> str | None:
    """The pending request for ``name``, consumed (None when there is none)."""
    path = status_dir() / f"{name}.request"
    try:
        action = path.read_text(encoding="utf-8").strip()
        path.unlink()
    except OSError:
        return None
    if action not in REQUESTS:
        _log(f"ignored request {action!r} for {name} (one of {', '.join(REQUESTS)})")
        return None
    return action


def _now_ms() -> int:
    return int(time.time() * 1000)


class Status:
    """One process's restart record, rewritten whole (write then rename) at every change."""

    def __init__(self, name: str) -> None:
        self.path = status_dir() / f"{name}.json"
        self.data: dict[str, object] = {
            "name": name,
            "supervisor_pid": os.getpid(),
            "state": "starting",
            "restarts": 0,
            "started_at": None,
            "last_exit": None,
        }

    def update(self, **fields: object) -> None:
        self.data.update(fields)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps(self.data), encoding="utf-8")
            temporary.replace(self.path)
        except OSError as exc:  # the status is for the console; never stop the process on it
            _log(f"could not write {self.path}: {exc}")


def _log(message: str) -> None:
    print(f"gentle_stop: {message}", file=sys.stderr, flush=True)


def _exit_text(code: int) -> str:
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def _stopped_cleanly(code: int) -> bool:
    return code in (0, -signal.SIGTERM, 128 + signal.SIGTERM)


def _options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    options: dict[str, str] = {}
    while argv[:1] in (["--restart"], ["--listen"], ["--instances"]) and len(argv) >= 3:
        options[argv[0][2:]] = argv[1]
        argv = argv[2:]
    return options, argv


class Instance:
    """One copy of the command: its child, its backoff and its restarts."""

    def __init__(self, number: int) -> None:
        self.number = number
        self.child: subprocess.Popen[bytes] | None = None
        self.started = 0.0
        self.started_at: int | None = None
        self.delay = BACKOFF_FIRST_SECONDS
        self.wake = 0.0  # when a dead instance is started again
        self.restarts = 0
        self.last_exit: dict[str, object] | None = None
        self.code: int | None = None  # the exit code once stopped for good
        self.asked: str | None = None  # "stop" or "restart" sent, until the child exits
        self.held = False  # stopped on request: not started again until asked

    @property
    def state(self) -> str:
        if self.child is not None and self.child.poll() is None:
            return "running"
        return "stopped" if self.code is not None or self.held else "restarting"

    def record(self) -> dict[str, object]:
        return {
            "number": self.number,
            "pid": self.child.pid if self.state == "running" and self.child else None,
            "state": self.state,
            "restarts": self.restarts,
            "started_at": self.started_at,
            "last_exit": self.last_exit,
            "held": self.held,
        }


def _status_fields(instances: list[Instance]) -> dict[str, object]:
    """The status file's fields: one process's, and with several instances their sum (running
    only when every instance runs; ``pid`` the first running one) plus each instance's own."""
    records = [instance.record() for instance in instances]
    states = {str(r["state"]) for r in records}
    state = (
        "running"
        if states == {"running"}
        else ("stopped" if states == {"stopped"} else "restarting")
    )
    exits = [r["last_exit"] for r in records if isinstance(r["last_exit"], dict)]
    starts = [r["started_at"] for r in records if isinstance(r["started_at"], int)]
    fields: dict[str, object] = {
        "state": state,
        "pid": next((r["pid"] for r in records if r["pid"] is not None), None),
        "restarts": sum(int(str(r["restarts"])) for r in records),
        "started_at": max(starts) if starts else None,
        "last_exit": max(exits, key=lambda e: int(str(e.get("at") or 0))) if exits else None,
        # Stopped on request (``manage.py process stop``): the wrapper runs, the command not.
        "held": any(r["held"] for r in records),
    }
    if len(records) > 1:
        fields["instances"] = records
    return fields


def main(argv: list[str]) -> int:
    options, argv = _options(argv)
    name = options.get("restart")
    try:
        count = int(options.get("instances", "1"))
    except ValueError:
        count = 0
    if not argv or argv[0].startswith("--") or count < 1 or (count > 1 and not name):
        print(
            "usage: python -m opensquilla_site.gentle_stop [--restart NAME [--instances N]]"
            " [--listen HOST:PORT] COMMAND [ARGS…]",
            file=sys.stderr,
        )
        return 2
    listener = listen(options["listen"]) if "listen" in options else None
    stopping = False
    instances = [Instance(number) for number in range(1, count + 1)]

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            for instance in instances:
                if instance.child is not None and instance.child.poll() is None:
                    instance.child.send_signal(signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)

    status = Status(name) if name else None

    def start(instance: Instance) -> None:
        instance.started = time.monotonic()
        instance.child = subprocess.Popen(  # noqa: S603
            argv,
            start_new_session=True,
            preexec_fn=_child_setup(listener, instance.number, count, name),  # noqa: PLW1509
            pass_fds=(_LISTEN_FD,) if listener is not None else (),
        )
        instance.started_at = _now_ms()
        if stopping:  # the stop arrived while the child was being started
            instance.child.send_signal(signal.SIGTERM)

    def exited(instance: Instance, code: int) -> None:
        """An instance ended: stopped for good when asked, else restarted after its backoff."""
        if stopping or status is None:
            instance.code = code
            return
        ran = time.monotonic() - instance.started
        if instance.asked is not None:
            asked, instance.asked = instance.asked, None
            text = "restarted on request" if asked == "restart" else "stopped on request"
            instance.last_exit = {"code": code, "text": text, "at": _now_ms(), "ran_s": ran}
            if asked == "restart":
                instance.restarts += 1
                instance.wake = time.monotonic()  # at once, and no backoff: nothing failed
            else:
                instance.held = True
            _log(f"{name}: {text} (exited with {_exit_text(code)} after {ran:.0f} s)")
            return
        if ran >= STABLE_AFTER_SECONDS:
            instance.delay = BACKOFF_FIRST_SECONDS
        instance.restarts += 1
        label = name if count == 1 else f"{name} instance {instance.number}"
        total = sum(i.restarts for i in instances)
        _log(
            f"{label} exited with {_exit_text(code)} after {ran:.0f} s; "
            f"restart {total} in {instance.delay:.0f} s"
        )
        instance.last_exit = {
            "code": code,
            "text": _exit_text(code),
            "at": _now_ms(),
            "ran_s": ran,
        }
        if count > 1:
            instance.last_exit["instance"] = instance.number
        instance.wake = time.monotonic() + instance.delay
        instance.delay = min(instance.delay * 2, BACKOFF_MAX_SECONDS)

    requests_done = 0
    # A request being carried out: the action, and the instances it still waits for.
    pending: tuple[str, list[Instance]] | None = None
    next_look = 0.0

    def take_request() -> None:
        """Look for a stop/start/restart request (twice a second) and begin it."""
        nonlocal pending, next_look
        if name is None or pending is not None or stopping or time.monotonic() < next_look:
            return
        next_look = time.monotonic() + REQUEST_POLL_SECONDS
        action = _take_request(name)
        if action is None:
            return
        _log(f"{name}: {action} requested")
        for instance in instances:
            if instance.held and action in ("start", "restart"):
                instance.held = False
                instance.wake = time.monotonic()
            elif action in ("stop", "restart") and instance.child is not None:
                instance.asked = action
                instance.child.send_signal(signal.SIGTERM)
            elif action == "stop" and instance.child is None:
                instance.held = True  # waiting for a restart: now held instead
        pending = (action, list(instances))

    def request_done() -> bool:
        """The pending request is carried out: every instance is where it was asked to be."""
        nonlocal pending, requests_done
        if pending is None:
            return False
        action, involved = pending
        want = "stopped" if action == "stop" else "running"
        if any(i.asked is not None or i.state != want for i in involved if i.code is None):
            return False
        pending = None
        requests_done += 1
        return True

    for instance in instances:
        start(instance)
    if status:
        status.update(**_status_fields(instances), requests_done=0)
    while True:
        changed = False
        take_request()
        for instance in instances:
            if instance.code is not None:
                continue
            if instance.child is None:
                if stopping:
                    instance.code = 0  # waiting for its restart when the stop came
                    changed = True
                elif not instance.held and time.monotonic() >= instance.wake:
                    start(instance)
                    changed = True
                continue
            code = instance.child.poll()
            if code is not None:
                instance.child = None
                exited(instance, code)
                changed = True
        if request_done():
            changed = True
        if changed and status:
            status.update(**_status_fields(instances), requests_done=requests_done)
        if all(instance.code is not None for instance in instances):
            codes = [int(str(instance.code)) for instance in instances]
            if not stopping:  # no status: a plain wrapper ends with its command
                return codes[0]
            return (
                0
                if all(_stopped_cleanly(code) for code in codes)
                else next(code for code in codes if not _stopped_cleanly(code))
            )
        time.sleep(0.05)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
