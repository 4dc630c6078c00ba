"""Run one Procfile command so that a stop signal reaches only its main process, and restart
it when it dies on its own.

``python -m opensquilla_site.gentle_stop [--restart NAME] [--listen HOST:PORT] <command> [args…]``

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
and are answered late instead of refused.
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


def _child_setup(listener: socket.socket | None) -> Callable[[], None]:
    """The preexec_fn of each start: die with the wrapper; find the listener, if any."""

    def setup() -> None:
        _die_with_parent()
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
    while argv[:1] in (["--restart"], ["--listen"]) and len(argv) >= 3:
        options[argv[0][2:]] = argv[1]
        argv = argv[2:]
    return options, argv


def main(argv: list[str]) -> int:
    options, argv = _options(argv)
    name = options.get("restart")
    if not argv or argv[0].startswith("--"):
        print(
            "usage: python -m opensquilla_site.gentle_stop [--restart NAME] [--listen HOST:PORT]"
            " COMMAND [ARGS…]",
            file=sys.stderr,
        )
        return 2
    listener = listen(options["listen"]) if "listen" in options else None
    stopping = False
    child: subprocess.Popen[bytes] | None = None

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            if child is not None and child.poll() is None:
                child.send_signal(signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)

    status = Status(name) if name else None
    delay = BACKOFF_FIRST_SECONDS
    while True:
        started = time.monotonic()
        child = subprocess.Popen(  # noqa: S603
            argv,
            start_new_session=True,
            preexec_fn=_child_setup(listener),  # noqa: PLW1509
            pass_fds=(_LISTEN_FD,) if listener is not None else (),
        )
        if stopping:  # the stop arrived while the child was being started
            child.send_signal(signal.SIGTERM)
        if status:
            status.update(state="running", pid=child.pid, started_at=_now_ms())
        code = child.wait()
        # Stopped as asked is a clean exit, not a failure of the process.
        if stopping or status is None:
            if status:
                status.update(state="stopped", pid=None)
            return 0 if stopping and _stopped_cleanly(code) else code
        ran = time.monotonic() - started
        if ran >= STABLE_AFTER_SECONDS:
            delay = BACKOFF_FIRST_SECONDS
        restarts = int(str(status.data["restarts"])) + 1
        _log(
            f"{name} exited with {_exit_text(code)} after {ran:.0f} s; "
            f"restart {restarts} in {delay:.0f} s"
        )
        status.update(
            state="restarting",
            pid=None,
            restarts=restarts,
            last_exit={"code": code, "text": _exit_text(code), "at": _now_ms(), "ran_s": ran},
        )
        wake = time.monotonic() + delay
        while not stopping and time.monotonic() < wake:
            time.sleep(0.1)
        if stopping:
            status.update(state="stopped")
            return 0
        delay = min(delay * 2, BACKOFF_MAX_SECONDS)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
