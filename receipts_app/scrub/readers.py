"""Reader processes: an unthrottled scrub reads its files on every core, not only on one.

Opening, reading and hashing a cold file costs CPU in Python's one interpreter lock; one
process reading files one at a time is CPU-bound at well under the disk's rate (measured in
docs/PERFORMANCE.md#checkpoint-scrub). So a full-speed read hands its chunks of files to a few
reader processes. Each runs ``filecheck`` alone (the standard library, no Django, no database,
started in milliseconds with ``python -I -S``). The scrub's process keeps the database work:
the walk, the verdicts and the writes.

Why not ``multiprocessing``: the Celery worker that runs a scrub is itself a pool child (a
daemon, which ``multiprocessing`` refuses to give children), and a forked child would inherit
the worker's threads and database connections. A plain child process on two pipes has neither
problem. Requests and answers are one JSON line each, tagged with the request they answer.

A reader that dies or does not answer fails only its own requests (``ReaderGone``). The scrub
then reads those files itself, so it loses nothing; see ``run._collect``.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from .filecheck import OUTCOMES, Found, Wanted

logger = logging.getLogger(__name__)

# The reader's whole program: ``filecheck`` imported by its file's directory (not as part of
# this package, whose ``__init__`` needs Django), then serving stdin until it closes.
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); import filecheck; filecheck.serve(sys.argv[2])"
)
_HERE = str(Path(__file__).resolve().parent)
# Seconds a reader has to end once its input is closed, before it is killed.
_STOP_SECONDS = 5.0


class ReaderGone(RuntimeError):
    """A reader process could not be started, died, or could not read a request."""


# What each field of a finding may be (``Found``'s, in order): an answer is checked before
# anything in it is believed.
_FIELD_TYPES: tuple[tuple[type, ...], ...] = (
    (str,),
    (str,),
    (int, type(None)),
    (int, type(None)),
    (int,),
    (str,),
    (bool,),
)


def _finding(values: Any) -> Found:
    if not isinstance(values, list) or len(values) != len(_FIELD_TYPES):
        raise ValueError(f"not a finding: {values!r:.80}")
    if values[0] not in OUTCOMES or not all(
        isinstance(value, types) for value, types in zip(values, _FIELD_TYPES, strict=True)
    ):
        raise ValueError(f"not a finding: {values!r:.80}")
    return Found(*values)


class _Reader:
    """One reader process and the answers it still owes."""

    def __init__(self, root: Path) -> None:
        self._lock = threading.Lock()
        self._owed: dict[int, tuple[Future[list[Found]], int]] = {}  # by tag; how many files
        self._tags = 0
        self.alive = True
        try:
            self._process = subprocess.Popen(  # noqa: S603 - our interpreter, our own module
                [sys.executable, "-I", "-S", "-c", _BOOT, _HERE, str(root)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                encoding="ascii",  # both sides write JSON with every non-ASCII escaped
                close_fds=True,
            )
        except OSError as exc:
            raise ReaderGone(f"cannot start a reader process: {exc}") from exc
        self._listener = threading.Thread(
            target=self._listen, name="scrub-reader-answers", daemon=True
        )
        self._listener.start()

    @property
    def owed(self) -> int:
        return len(self._owed)

    def submit(self, files: list[Wanted]) -> Future[list[Found]]:
        future: Future[list[Found]] = Future()
        with self._lock:
            if not self.alive:
                raise ReaderGone("the reader process has ended")
            self._tags += 1
            tag = self._tags
            self._owed[tag] = (future, len(files))
        line = json.dumps([tag, files], separators=(",", ":")) + "\n"
        pipe = self._process.stdin
        try:
            if pipe is None:
                raise ValueError("no pipe")
            pipe.write(line)
            pipe.flush()
        except (OSError, ValueError) as exc:
            self._fail(ReaderGone(f"the reader process took no request: {exc}"))
        return future

    def _listen(self) -> None:
        """Hand each answer to the request it answers; when the process ends, fail the rest."""
        try:
            for line in self._process.stdout or ():
                self._deliver(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - whatever it wrote, its requests fail, not us
            logger.warning("scrub: a reader process answered what cannot be read: %s", exc)
        self._fail(ReaderGone("the reader process ended with requests unanswered"))

    def _deliver(self, answer: list[Any]) -> None:
        tag, found = answer[0], answer[1]
        with self._lock:
            owed = self._owed.pop(tag, None)
        if owed is None:
            return
        future, count = owed
        if found is None:
            future.set_exception(ReaderGone(str(answer[2] if len(answer) > 2 else "no answer")))
            return
        try:
            if not isinstance(found, list) or len(found) != count:
                raise ValueError(f"{count} files asked, not so many answers")
            future.set_result([_finding(values) for values in found])
        except (TypeError, ValueError) as exc:
            future.set_exception(ReaderGone(f"a reader process answered nonsense: {exc}"))

    def _fail(self, error: ReaderGone) -> None:
        with self._lock:
            self.alive = False
            owed, self._owed = self._owed, {}
        for future, _count in owed.values():
            if not future.done():
                future.set_exception(error)

    def kill(self) -> None:
        """End a reader that does not answer; its listener fails what it still owes."""
        self._process.kill()

    def end_input(self) -> None:
        """Close its input: it ends once its requests are answered."""
        try:
            if self._process.stdin is not None:
                self._process.stdin.close()
        except OSError:
            pass

    def stop(self) -> None:
        """End it (its input closed first); kill it if it does not end."""
        self.end_input()
        try:
            self._process.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._listener.join(timeout=_STOP_SECONDS)
        self._fail(ReaderGone("the reader process was stopped"))


class ReaderProcesses:
    """``processes`` reader processes reading files under ``root``; started at the first
    request (a run that reads no file starts none)."""

    def __init__(self, root: Path, *, processes: int) -> None:
        self.root = root
        self.processes = processes
        self._readers: list[_Reader] = []
        self._started = False
        self._owner: dict[Future[list[Found]], _Reader] = {}

    def submit(self, files: list[Wanted]) -> Future[list[Found]]:
        """Check ``files`` on the reader that owes the fewest answers; ``ReaderGone`` (at once,
        or from the future) when no reader can."""
        if not self._started:
            self._started = True
            for _ in range(self.processes):
                try:
                    self._readers.append(_Reader(self.root))
                except ReaderGone as exc:
                    logger.warning("scrub: %s; the scrub reads those files itself", exc)
        live = [reader for reader in self._readers if reader.alive]
        if not live:
            raise ReaderGone("no reader process is running")
        reader = min(live, key=lambda one: one.owed)
        future = reader.submit(files)
        self._owner[future] = reader
        return future

    def answer(self, future: Future[list[Found]], timeout: float) -> list[Found]:
        """What ``future``'s reader found; ``ReaderGone`` when it could not say. A reader
        that has not answered within ``timeout`` seconds is ended, so the requests it still
        holds fail at once rather than each waiting out its own timeout."""
        reader = self._owner.pop(future, None)
        try:
            return future.result(timeout)
        except TimeoutError:
            if reader is not None:
                reader.kill()
            raise ReaderGone(f"a reader process did not answer within {timeout:g} s") from None

    def close(self) -> None:
        for reader in self._readers:  # all told at once, then each waited for
            reader.end_input()
        for reader in self._readers:
            reader.stop()
        self._readers = []
        self._owner = {}

    def __enter__(self) -> ReaderProcesses:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
