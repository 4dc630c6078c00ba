"""Run one Procfile command so that a stop signal reaches only its main process.

``python -m opensquilla_site.gentle_stop <command> [args…]``

honcho (``make run``) stops a process by signalling its whole process group, and Ctrl-C in a
terminal does the same to the foreground group. A Celery worker's prefork children then die
mid-task (the worker logs ``Process 'ForkPoolWorker-1' exited with 'signal 15 (SIGTERM)'``
as errors and restarts them) before its warm shutdown could stop them in order. Here the
command runs in its own process group, and SIGTERM, SIGINT or SIGHUP is passed to the main
process alone, as one SIGTERM: Celery's warm shutdown, gunicorn's graceful stop.
"""

from __future__ import annotations

import ctypes
import signal
import subprocess
import sys
from types import FrameType

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # If this wrapper is SIGKILLed, the command still gets its SIGTERM (Linux only).
    try:
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m opensquilla_site.gentle_stop COMMAND [ARGS…]", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv, start_new_session=True, preexec_fn=_die_with_parent)  # noqa: S603, PLW1509
    stopping = False

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        if not stopping:
            stopping = True
            child.send_signal(signal.SIGTERM)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    code = child.wait()
    # Stopped as asked is a clean exit, not a failure of the process.
    return 0 if stopping and code in (0, -signal.SIGTERM, 128 + signal.SIGTERM) else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
