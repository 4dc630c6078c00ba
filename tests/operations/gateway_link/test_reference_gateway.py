"""The gateway link against a real OpenSquilla 0.3.0 gateway (the reference venv's).

One gateway per module, in token mode, on a free loopback port with its own home folder
(``HOME`` and ``OPENSQUILLA_STATE_DIR``: 0.3.0 reads no ``OPENSQUILLA_HOME``), its own
background repair loop off so only our call repairs. A failing checkpoint and a due repair
are written into its ledger through its own storage; the link must then read the
gateway's own verdict and run the repair.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from operations_app.gateway_link import LinkState, read_memory_status, run_due_repairs
from receipts_app.importer import read_schema_version_at

pytestmark = pytest.mark.reference

ROOT = Path(__file__).resolve().parents[3]
REF_VENV = ROOT / "var" / "bench" / "ref-venv" / "bin"
WRITER = Path(__file__).with_name("reference_gateway_writer.py")
TOKEN = "link-test-token-7f3a"
STARTUP_SECONDS = 60


@dataclass(frozen=True)
class Gateway:
    address: str
    home: Path

    @property
    def state(self) -> Path:
        return self.home / ".opensquilla" / "state"

    @property
    def workspace(self) -> Path:
        return self.home / ".opensquilla" / "workspace"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def gateway(tmp_path_factory) -> Iterator[Gateway]:
    if not (REF_VENV / "opensquilla").exists():
        pytest.skip(f"no reference venv at {REF_VENV}: run bash bench/reference_venv.sh")
    home = tmp_path_factory.mktemp("gateway-home")
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(home),
        "OPENSQUILLA_STATE_DIR": str(home / ".opensquilla"),
        "OPENSQUILLA_AUTH_MODE": "token",
        "OPENSQUILLA_AUTH_TOKEN": TOKEN,
        "OPENSQUILLA_MEMORY_REPAIR_ENABLED": "false",
    }
    log = (home / "gateway.log").open("wb")
    process = subprocess.Popen(
        [str(REF_VENV / "opensquilla"), "gateway", "run", "--port", str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group, so the teardown reaches its children
    )
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while not healthy(port):
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the reference gateway did not start: see {home / 'gateway.log'}")
            time.sleep(0.5)
        yield Gateway(address=f"127.0.0.1:{port}", home=home)
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=5)
        log.close()


@pytest.fixture(scope="module")
def written(gateway: Gateway) -> dict[str, str]:
    result = subprocess.run(
        [
            str(REF_VENV / "python"),
            str(WRITER),
            str(gateway.state / "sessions.db"),
            str(gateway.workspace),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_link_reads_the_gateways_own_memory_verdict(gateway, written) -> None:
    answer = read_memory_status(gateway.address, agent_ids=["main"], token=TOKEN)

    assert answer.state is LinkState.OK, answer.message
    assert (answer.hello.server_version, answer.hello.protocol) == ("0.3.0", 3)
    assert answer.hello.state_dir == str(gateway.state)
    verdict = answer.value["main"].value
    # The gateway itself counts the failed checkpoint and the queued repair.
    assert verdict.memory_safety == "error"
    assert verdict.repair_backlog == 1
    assert verdict.pending_repairs == 0  # deep: no degraded compactions here
    assert verdict.raw_fallbacks is not None


def test_a_wrong_token_is_refused_by_the_real_gateway(gateway) -> None:
    answer = read_memory_status(gateway.address, token="not-the-token")

    assert answer.state is LinkState.TOKEN_REFUSED
    assert answer.failure.code == "UNAUTHORIZED"


def test_no_token_is_refused_and_says_one_is_needed(gateway) -> None:
    answer = read_memory_status(gateway.address)

    assert answer.state is LinkState.TOKEN_REFUSED
    assert "needs a token" in answer.message


def test_an_unknown_agent_gets_its_own_healthy_answer(gateway, written) -> None:
    answer = read_memory_status(gateway.address, agent_ids=["main", "ops"], token=TOKEN)

    assert answer.value["ops"].value.memory_safety == "ok"
    assert answer.value["main"].value.memory_safety == "error"


def test_the_gateway_runs_its_due_repair_and_names_the_row(gateway, written) -> None:
    answer = run_due_repairs(gateway.address, agent_id="main", token=TOKEN)

    assert answer.state is LinkState.OK, answer.message
    (result,) = answer.value.results
    assert result["receiptId"] == written["repair"]
    # No flush model is configured: the repair archives again and backs off, as upstream.
    assert result["status"] == "failed_retryable"

    # Run again at once: our row is backing off, so the gateway leaves it alone. (It does
    # pick up the fresh archive its own degraded repair flush just wrote, as a legacy row:
    # upstream's behaviour, which our repair worker avoids, docs/WORKERS.md.)
    again = run_due_repairs(gateway.address, agent_id="main", token=TOKEN)
    assert again.state is LinkState.OK
    assert written["repair"] not in {r.get("receiptId") for r in again.value.results}
    assert {r.get("sessionKey") for r in again.value.results} <= {
        "agent:main:memory-repair:legacy-raw"
    }


def test_a_booted_0_3_0_gateways_file_reads_as_schema_7_with_its_migrations(gateway) -> None:
    schema = read_schema_version_at(gateway.state / "sessions.db")

    assert schema.storage_version == 7
    assert schema.latest_migration == "V014__meta_skill_run_steps_allow_user_input"
    assert len(schema.migrations) == 15
