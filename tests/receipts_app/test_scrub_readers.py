"""The scrub's reader processes (receipts_app/scrub/readers.py): an unthrottled scrub reads its
files in other processes, finds exactly what this process would, and loses no file when a
reader dies, talks nonsense or hangs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from receipts_app.models import CheckpointVerification, MemoryDurableReceipt
from receipts_app.scrub import filecheck, readers, scrub_checkpoints
from receipts_app.scrub import run as scrub_run
from sessions_app.gateways import ensure_gateway, using_gateway
from tests.factories import make_session

pytestmark = pytest.mark.django_db


@pytest.fixture
def host_b(settings, workspace):
    """Gateway b's host, scrubbing unthrottled (the reads reader processes are for)."""
    ensure_gateway("b")
    settings.OPENSQUILLA_GATEWAY = "b"
    settings.OPENSQUILLA_SCRUB_READ_BYTES_PER_SECOND = 0
    settings.OPENSQUILLA_SCRUB_READER_PROCESSES = 2
    return workspace


@pytest.fixture
def started(monkeypatch):
    """The reader processes started, counted."""
    count = {"readers": 0}
    real = readers._Reader.__init__

    def counted(self, root):
        count["readers"] += 1
        real(self, root)

    monkeypatch.setattr(readers._Reader, "__init__", counted)
    return count


def _damaged_set(root, tmp_path) -> dict[str, str]:
    """Seven checkpoints: whole, deleted, a flipped byte, a directory in its place, events
    of another coverage, a symlink out of the workspace, one inside. The outcome each must
    get, by receipt id."""
    with using_gateway("b"):
        from receipts_app.checkpoint import record_memory_checkpoint

        rows = [
            record_memory_checkpoint(
                make_session(f"agent:main:webchat:r{n}", messages=3).session_key
            )
            for n in range(7)
        ]
    whole, gone, flipped, directory, coverage, escaped, linked = rows
    (root / gone.source_path).unlink()
    path = root / flipped.source_path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    path = root / directory.source_path
    path.unlink()
    path.mkdir()
    MemoryDurableReceipt.objects.filter(pk=coverage.pk).update(coverage_entry_count=99)
    outside = tmp_path / "outside"
    outside.mkdir()
    path = root / escaped.source_path
    (outside / "copy.jsonl").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside / "copy.jsonl")
    path = root / linked.source_path
    (root / "kept.jsonl").write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(root / "kept.jsonl")
    return {
        whole.receipt_id: "ok",
        gone.receipt_id: "missing",
        flipped.receipt_id: "hash_mismatch",
        directory.receipt_id: "unreadable",
        coverage.receipt_id: "coverage_mismatch",
        escaped.receipt_id: "unreadable",
        linked.receipt_id: "ok",
    }


def _found() -> dict[str, tuple]:
    return {
        v.receipt.receipt_id: (v.outcome, v.detail, v.size, v.mtime_ns, v.parsed_hash)
        for v in CheckpointVerification.objects.select_related("receipt")
    }


def _statuses() -> dict[str, str]:
    return dict(MemoryDurableReceipt.objects.values_list("receipt_id", "status"))


def _forget() -> None:
    """Back to before the scrub: no verification, every receipt saved."""
    CheckpointVerification.objects.all().delete()
    MemoryDurableReceipt.objects.update(status="checkpoint_saved", reason=None)


def test_reader_processes_find_exactly_what_this_process_finds(
    host_b, tmp_path, settings, started, caplog
):
    expected = _damaged_set(host_b, tmp_path)

    report = scrub_checkpoints("b", force=True, full=True)

    assert started["readers"] == 2
    assert "reading its files in this process" not in caplog.text  # the readers answered
    assert {rid: found[0] for rid, found in _found().items()} == expected
    # Read: whole, flipped, coverage, linked (the escaped one is refused before a read).
    assert (report.files_read, report.missing, report.damaged) == (4, 1, 4)
    by_processes, statuses = _found(), _statuses()
    assert sum("escapes the workspace" in found[1] for found in by_processes.values()) == 1

    _forget()
    settings.OPENSQUILLA_SCRUB_READER_PROCESSES = 0
    scrub_checkpoints("b", force=True, full=True)
    assert started["readers"] == 2  # none more
    assert _found() == by_processes
    assert _statuses() == statuses


@pytest.mark.parametrize(
    "program",
    [
        "import sys; sys.exit(3)",  # dies at once
        "import sys\nfor line in sys.stdin: print('not json', flush=True)",  # nonsense
        "import sys\nfor line in sys.stdin: print('[1, [[1, 2]]]', flush=True)",  # wrong shape
        "import time; time.sleep(60)",  # never answers
    ],
    ids=["dies", "nonsense", "wrong-shape", "hangs"],
)
def test_a_reader_process_that_fails_loses_no_file(
    host_b, tmp_path, monkeypatch, caplog, started, program
):
    monkeypatch.setattr(readers, "_BOOT", program)
    monkeypatch.setattr(readers, "_STOP_SECONDS", 0.5)
    monkeypatch.setattr(scrub_run, "READER_ANSWER_SECONDS", 1.0)
    expected = _damaged_set(host_b, tmp_path)

    report = scrub_checkpoints("b", force=True, full=True)

    assert started["readers"] == 2
    assert {rid: found[0] for rid, found in _found().items()} == expected
    assert (report.missing, report.damaged) == (1, 4)
    assert "reading its files in this process" in caplog.text


def test_a_reader_runs_the_checks_alone_without_django_or_the_project():
    """What a reader imports: ``filecheck`` and the standard library (it starts with ``-S``,
    no site-packages), so it needs no settings and starts in milliseconds."""
    probe = readers._BOOT.replace(
        "filecheck.serve(sys.argv[2])",
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'django', 'receipts_app', 'sessions_app', 'operations_app', 'opensquilla_site'}))",
    )
    assert probe != readers._BOOT
    out = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe, readers._HERE],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "[]"


def test_a_reader_that_cannot_be_started_loses_no_file(host_b, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(readers.sys, "executable", str(tmp_path / "no-such-python"))
    expected = _damaged_set(host_b, tmp_path)
    scrub_checkpoints("b", force=True, full=True)
    assert {rid: found[0] for rid, found in _found().items()} == expected
    assert "cannot start a reader process" in caplog.text


def test_a_run_that_reads_no_file_or_is_throttled_starts_no_reader(host_b, started):
    with using_gateway("b"):
        from receipts_app.checkpoint import record_memory_checkpoint

        for n in range(3):
            record_memory_checkpoint(
                make_session(f"agent:main:webchat:w{n}", messages=3).session_key
            )
    scrub_checkpoints("b", force=True, full=True)
    assert started["readers"] == 2
    # Nothing changed: a stat each, no file read, no reader started.
    report = scrub_checkpoints("b", force=True, full=False)
    assert (report.stat_only, report.files_read, started["readers"]) == (3, 0, 2)
    # Throttled: read here, one file after another, held to the rate.
    report = scrub_checkpoints("b", force=True, full=True, rate=10**12)
    assert (report.files_read, started["readers"]) == (3, 2)


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd is Linux's")
def test_checking_files_together_leaves_no_descriptor_open(host_b, tmp_path, monkeypatch):
    _damaged_set(host_b, tmp_path)
    wanted = [
        filecheck.Wanted(r.source_path, r.content_hash, r.session_key, r.turn_id, None)
        for r in MemoryDurableReceipt.objects.order_by("pk")
    ]
    before = _open_descriptors()
    found = filecheck.check_files(wanted, host_b)
    assert [f.outcome for f in found].count("ok") == 3  # whole, coverage (not asked), linked
    assert _open_descriptors() == before

    calls = {"n": 0}
    real = filecheck._read_fd

    def fails_on_the_second(*args):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return real(*args)

    monkeypatch.setattr(filecheck, "_read_fd", fails_on_the_second)
    with pytest.raises(RuntimeError):
        filecheck.check_files(wanted, host_b)
    assert _open_descriptors() == before


def _event(sequence: int, **extra) -> str:
    event = {"event_id": f"e{sequence}", "role": "user", "sequence": sequence}
    event.update(session_key="agent:main:x", turn_id="t", **extra)
    return json.dumps(event)


@pytest.mark.parametrize(
    ("lines", "problem"),
    [
        ([_event(1), _event(2)], None),
        (
            [_event(1), "{not json"],
            "line 2 is not JSON: Expecting property name enclosed in double quotes",
        ),
        # Two events on one line and none on another: still refused, whichever way it is parsed.
        ([_event(1) + "," + _event(2), _event(3)], "line 1 is not JSON: Extra data"),
        ([_event(1), ""], "line 2 is not JSON: Expecting value"),
        ([_event(1), _event(3)], "line 2 has sequence 3"),
        (["[1, 2]"], "line 1 is not a checkpoint event"),
    ],
    ids=["whole", "bad-line", "two-on-a-line", "empty-line", "sequence", "not-an-event"],
)
def test_a_checkpoints_lines_are_checked_one_by_one(lines, problem):
    body = ("\n".join(lines) + "\n").encode()
    assert filecheck.coverage_problem(body, "agent:main:x", "t", None) == problem


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_reader_processes_end_when_their_scrub_is_killed(tmp_path):
    """kill -9 of the worker running a scrub leaves no reader behind: a reader's input
    closes with its scrub, and it ends."""
    program = (
        "import django, os, sys, time\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'opensquilla_site.settings')\n"
        "django.setup()\n"
        "from pathlib import Path\n"
        "from receipts_app.scrub.readers import ReaderProcesses\n"
        "readers = ReaderProcesses(Path(sys.argv[1]), processes=2)\n"
        "readers.submit([]).result(30)\n"
        "print(' '.join(str(r._process.pid) for r in readers._readers), flush=True)\n"
        "time.sleep(60)\n"
    )
    scrub = subprocess.Popen(
        [sys.executable, "-c", program, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=str(readers.Path(readers._HERE).parents[1]),
    )
    try:
        pids = [int(pid) for pid in scrub.stdout.readline().split()]
        assert len(pids) == 2 and all(os.path.exists(f"/proc/{pid}") for pid in pids)
        scrub.kill()
        scrub.wait(10)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(_running(pid) for pid in pids):
            time.sleep(0.05)
        assert not any(_running(pid) for pid in pids)
    finally:
        scrub.kill()
        scrub.wait()


def _running(pid: int) -> bool:
    """Alive and not a zombie (a reader whose parent died is reaped by init)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
