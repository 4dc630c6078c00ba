"""Two gateways whose session keys overlap stay apart, end to end (issue 19, item 4).

Two real OpenSquilla 0.3.0 writers (the reference venv, tests/mirror/reference_writer.py) each
write a ``sessions.db`` holding the same session key ``agent:main:webchat:default`` with their
own transcript and their own failures: gateway ``a`` one saved and three failed checkpoints,
gateway ``b`` a repair given up and one failed checkpoint. The Procfile's mirror
(``run_mirror`` with ``OPENSQUILLA_SOURCES``, one process following both) brings each under
its own gateway name into this test's PostgreSQL. Then every surface, read through the Django
test client as an operator would, shows each gateway its own rows and numbers: the sessions
list and transcript under the shared key, ``GET /gateways`` and the ``?gateway=`` receipt
lists, the ``/metrics`` series with a ``gateway`` label, an alert rule scoped to ``b`` (fires
for ``b`` only, and its notification names ``b``), and the overview's fleet view.

Only the writers and the follower are real processes; one test, so they start once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from operations_app.alerts.evaluate import evaluate_alerts
from operations_app.alerts.service import save_rule
from operations_app.models import AlertIncident, AlertRule
from receipts_app.mirror.models import MirrorSource
from receipts_app.models import MemoryDurableReceipt
from sessions_app.models import TranscriptEntry
from tests.api.conftest import ApiCaller, _caller
from tests.conftest import require_postgres  # noqa: F401
from tests.console.test_fleet_view import _fleet, _listed
from tests.operations.conftest import (  # noqa: F401
    allow_local_targets,
    read_token,
    run_deliveries_inline,
)
from tests.operations.receivers import http_receiver
from tests.operations.test_metrics import scrape
from tests.worker.conftest import BROKER_IS_REDIS, wait_for, worker_database_url

from .own_ledger import own_coverage
from .test_reference_writer import WRITER, ref_python  # noqa: F401

pytestmark = [
    pytest.mark.reference,
    pytest.mark.postgres,
    *([pytest.mark.redis] if BROKER_IS_REDIS else []),
    pytest.mark.xdist_group("real-processes"),
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("require_postgres"),
]

ROOT = Path(__file__).resolve().parents[2]
KEY = "agent:main:webchat:default"
SECRET = "whsec-apart-secret-0123456789"

# What each gateway's writer writes: its messages' text, its receipts' statuses, its reasons.
GATEWAYS = {
    "a": {
        "text": "gateway a says",
        "messages": 3,
        "statuses": ["checkpoint_saved"] + ["checkpoint_failed"] * 3,
        "reason": "a: disk full",
    },
    "b": {
        "text": "gateway b says",
        "messages": 2,
        "statuses": ["repair_failed", "checkpoint_failed"],
        "reason": "b: permission denied",
    },
}
# What each gateway then holds at risk (failures waiting for an operator) and given up.
AT_RISK = {"a": 3, "b": 2}
GIVEN_UP = {"a": 0, "b": 1}


def _write(python: Path, db: Path, plan: dict) -> subprocess.Popen[str]:
    db.parent.mkdir(parents=True)
    return subprocess.Popen(  # noqa: S603 - our own venv, fixed argv
        [
            str(python),
            str(WRITER),
            str(db),
            "receipts",
            "--key",
            KEY,
            "--text",
            plan["text"],
            "--messages",
            str(plan["messages"]),
            "--statuses",
            ",".join(plan["statuses"]),
            "--reason",
            plan["reason"],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def mirror(tmp_path) -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _start_mirror(tmp_path: Path, dbs: dict[str, Path]) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "OPENSQUILLA_ENV_FILE": "",
        "OPENSQUILLA_SOURCES": " ".join(f"{name}={db}" for name, db in dbs.items()),
        "OPENSQUILLA_MIRROR_INTERVAL": "0.2",
        "OPENSQUILLA_CHECKPOINT_WORKSPACE": str(tmp_path / "central"),
    }
    env.pop("OPENSQUILLA_SOURCE_DB", None)
    log = (tmp_path / "mirror.log").open("wb")
    return subprocess.Popen(  # noqa: S603 - our own venv, fixed argv
        [sys.executable, str(ROOT / "manage.py"), "run_mirror"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )


def _statuses(items: list[dict]) -> Counter[str]:
    return Counter(item["status"] for item in items)


def test_two_real_gateways_with_overlapping_keys_stay_apart_on_every_surface(
    ref_python,  # noqa: F811
    mirror,
    tmp_path,
    read_token,  # noqa: F811
    viewer_client,
    allow_local_targets,  # noqa: F811
    run_deliveries_inline,  # noqa: F811
):
    dbs = {name: tmp_path / f"host-{name}" / "sessions.db" for name in GATEWAYS}
    writers = [_write(ref_python, dbs[name], plan) for name, plan in GATEWAYS.items()]
    for writer in writers:
        out, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err[-2000:]
        assert json.loads(out.splitlines()[-1])["done"]
    mirror.append(_start_mirror(tmp_path, dbs))

    def followed() -> bool:
        if mirror[0].poll() is not None:
            pytest.fail((tmp_path / "mirror.log").read_text(errors="replace")[-4000:])
        return all(
            MemoryDurableReceipt.objects.filter(gateway_id=name).count() == len(plan["statuses"])
            and TranscriptEntry.objects.filter(gateway_id=name).count() == plan["messages"]
            for name, plan in GATEWAYS.items()
        ) and (MirrorSource.objects.filter(initial_sync_done=True).count() == 2)

    wait_for(followed, what="both gateways followed by the mirror", timeout=180)
    # What is asserted below is read from the database only: the follower can go.
    mirror[0].send_signal(signal.SIGTERM)
    mirror[0].wait(timeout=30)

    reader: ApiCaller = _caller("reader", "viewer", "read")

    # --- sessions: one key, each gateway's own transcript ----------------------------------
    for name, plan in GATEWAYS.items():
        other = "b" if name == "a" else "a"
        listed = reader.get("/sessions", {"gateway": name}).json()["items"]
        assert [(s["session_key"], s["gateway"]) for s in listed] == [(KEY, name)]
        transcript = reader.get(f"/sessions/{KEY}/transcript", {"gateway": name}).json()
        assert [e["content"] for e in transcript["items"]] == [
            f"{plan['text']} {i}" for i in range(plan["messages"])
        ]
        page = viewer_client.get(f"/sessions/s/{KEY}?gateway={name}").content.decode()
        assert plan["text"] in page and GATEWAYS[other]["text"] not in page
        # Both start their entry ids at 1: each keeps its own, and its coverage is its own.
        assert [e["id"] for e in transcript["items"]] == list(range(1, plan["messages"] + 1))
        coverage = reader.get(f"/sessions/{KEY}/coverage", {"gateway": name}).json()
        assert coverage["covered"] is own_coverage(dbs[name])[KEY]
    assert sorted(s["gateway"] for s in reader.get("/sessions").json()["items"]) == ["a", "b"]

    # --- receipts: each gateway's own rows, statuses, reasons and counts -------------------
    fleet_api = {g["name"]: g for g in reader.get("/gateways").json()["items"]}
    # Operators see where each gateway is followed from; a viewer (read scope) does not.
    operator: ApiCaller = _caller("operator", "operator", "operate")
    sources = {g["name"]: g["source"] for g in operator.get("/gateways").json()["items"]}
    for name, plan in GATEWAYS.items():
        items = reader.get("/receipts", {"gateway": name, "limit": 100}).json()["items"]
        assert {r["gateway"] for r in items} == {name}
        assert {r["session_key"] for r in items} == {KEY}
        assert _statuses(items) == Counter(plan["statuses"])
        reasons = {r["reason"] for r in items if r["status"].endswith("_failed")}
        assert reasons and all(reason.startswith(plan["reason"]) for reason in reasons)
        gateway = fleet_api[name]
        assert sources[name] == str(dbs[name].resolve())
        assert gateway["source"] == "" and gateway["mirror"][0]["source"] == ""
        assert gateway["receipts"] == len(plan["statuses"])
        assert gateway["at_risk"]["memory_at_risk"]["count"] == AT_RISK[name]
        assert gateway["at_risk"]["terminal_repairs"]["count"] == GIVEN_UP[name]
        assert gateway["mirror"] and gateway["mirror"][0]["gateway"] == name

    # --- /metrics: the same agent on two gateways, two series with their own numbers -------
    samples = scrape(read_token)
    for name, plan in GATEWAYS.items():
        labels = (("agent", "main"), ("gateway", name))
        assert samples["opensquilla_memory_at_risk"][labels] == AT_RISK[name]
        counted = Counter()
        for key, value in samples["opensquilla_receipts"].items():
            series = dict(key)
            if series["gateway"] == name:
                assert series["agent"] == "main"
                counted[series["status"]] += int(value)
        assert +counted == Counter(plan["statuses"])

    # --- alerts: a rule scoped to b fires for b only, and its notification names b ---------
    with http_receiver() as receiver:
        rule = save_rule(
            values={
                "name": "b's failures",
                "condition": AlertRule.FAILURE_STATUS,
                "threshold": 1,
                "channel": "webhook",
                "target": receiver.url,
                "gateway": "b",
            },
            actor="ada",
            secret=SECRET,
        )
        assert evaluate_alerts().opened == 1
        sent = [json.loads(r.body) for r in receiver.requests]
    (incident,) = AlertIncident.objects.filter(rule=rule)
    assert (incident.gateway_id, incident.subject) == ("b", "b/main")
    assert incident.value == AT_RISK["b"]
    (notice,) = sent
    assert notice["gateway"] == "b" and notice["rule_gateway"] == "b"
    assert "gateway b" in notice["summary"] and "gateway a" not in notice["summary"]

    # --- the fleet view: each gateway's row counts its own rows, and links to them only ----
    fleet = _fleet(viewer_client)
    assert {"a", "b"} <= set(fleet)
    for name, plan in GATEWAYS.items():
        links = fleet[name]["links"]
        assert links["memory_at_risk"][0] == AT_RISK[name]
        assert links["terminal_repairs"][0] == GIVEN_UP[name]
        assert links["receipts"][0] == len(plan["statuses"])
        for what, (count, href) in links.items():
            ids = _listed(viewer_client, href)
            assert len(ids) == count, f"{name} {what}: {href}"
            owners = set(
                MemoryDurableReceipt.objects.filter(receipt_id__in=ids).values_list(
                    "gateway_id", flat=True
                )
            )
            assert owners <= {name}, f"{name} {what} lists another gateway's rows"
