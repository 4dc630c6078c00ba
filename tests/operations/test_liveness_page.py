"""The liveness page as a viewer reads it: who is alive, since when, and what waits in queues."""

from __future__ import annotations

import os
import uuid

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from kombu import Connection

from opensquilla_site import timeutil
from operations_app import heartbeats
from operations_app.models import Heartbeat
from tests.console.conftest import hx
from tests.factories import make_user

pytestmark = pytest.mark.django_db
URL = "/operations/liveness/"


@pytest.fixture
def viewer(db) -> Client:
    make_user("lena", "viewer")
    client = Client()
    client.login(username="lena", password="pw-Secret-123")
    return client


@pytest.fixture
def operator(db) -> Client:
    make_user("oskar", "operator")
    client = Client()
    client.login(username="oskar", password="pw-Secret-123")
    return client


def _heartbeat(kind: str, name: str, age_s: int, state: str = "running") -> None:
    now = timeutil.now_ms()
    heartbeats.mark_started(kind, name)
    Heartbeat.objects.filter(kind=kind, name=name).update(
        seen_at=now - age_s * 1000 - 500, started_at=now - 9 * 3600_000, state=state
    )


@pytest.fixture
def fs_broker(settings, tmp_path):
    """The embedded broker (a SQLite file), in this test's own folder."""
    settings.CELERY_BROKER_URL = f"sqlite:///{tmp_path / 'broker.sqlite3'}"
    settings.CELERY_BROKER_TRANSPORT_OPTIONS = {}
    return settings.CELERY_BROKER_URL


def test_liveness_shows_alive_silent_and_stopped_workers_and_beat(viewer, settings, fs_broker):
    # Ages in whole minutes and hours, so the page's rounding cannot flake.
    settings.OPENSQUILLA_HEARTBEAT_STALE_SECONDS = 3600
    _heartbeat("worker", "celery@alive", 5)
    _heartbeat("worker", "celery@silent", 7200)
    _heartbeat("worker", "celery@gone", 30, state="stopped")
    _heartbeat("beat", "beat@host", 1800)
    response = viewer.get(URL)
    assert response.status_code == 200
    html = response.content.decode()
    assert "1 alive" in html and "of 3 known" in html
    # A viewer reads each worker's state, not its node name (it names the host).
    assert "celery@" not in html and "beat@host" not in html
    assert "2 h ago" in html  # the silent worker's age, as a person reads it
    assert "stopped" in html and "silent" in html
    assert "ticking" in html and "last tick 30 min ago" in html


def test_liveness_without_any_heartbeat_says_how_to_start_a_worker(viewer, fs_broker):
    html = viewer.get(URL).content.decode()
    assert "No worker has ever reported" in html
    assert "never seen" in html
    assert "No mirror is running" in html


def test_queue_depth_on_the_embedded_broker_counts_waiting_messages(viewer, fs_broker):
    with Connection(fs_broker) as conn:
        queue = conn.SimpleQueue("celery")
        for i in range(4):
            queue.put({"n": i})
        queue.get(timeout=5).ack()  # delivered: no longer waiting
        queue.close()
    html = viewer.get(URL).content.decode()
    assert "<td><code>celery</code></td><td>sqlite</td>" in html
    assert '<td class="num">3</td>' in html


@pytest.mark.redis
def test_queue_depth_on_redis_counts_real_messages(viewer, settings):
    url = os.environ.get("CELERY_BROKER_URL", "")
    if not url.startswith("redis://"):
        pytest.skip("needs a Redis broker: set CELERY_BROKER_URL=redis://...")
    queue_name = f"osq-liveness-{uuid.uuid4().hex[:10]}"
    settings.CELERY_BROKER_URL = url
    settings.CELERY_TASK_DEFAULT_QUEUE = queue_name
    with Connection(url) as conn:
        queue = conn.SimpleQueue(queue_name)
        try:
            for i in range(4):
                queue.put({"n": i})
            html = viewer.get(URL).content.decode()
        finally:
            queue.clear()
            queue.close()
    assert f"<td><code>{queue_name}</code></td><td>redis</td>" in html
    assert '<td class="num">4</td>' in html


def test_an_unreachable_broker_shows_unreadable_not_an_error(viewer, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = viewer.get(URL)
    assert response.status_code == 200
    assert "unreadable" in response.content.decode()


def test_liveness_refresh_fragment_and_query_count(viewer, fs_broker):
    _heartbeat("worker", "celery@one", 5)
    with CaptureQueriesContext(connection) as small:
        response = viewer.get(URL, **hx("liveness-body"))
    assert response.status_code == 200
    assert "<html" not in response.content.decode()  # the fragment only
    for i in range(30):
        _heartbeat("worker", f"celery@many-{i}", i)
    with CaptureQueriesContext(connection) as large:
        viewer.get(URL, **hx("liveness-body"))
    assert len(large.captured_queries) == len(small.captured_queries)
    assert len(small.captured_queries) <= 8


def test_the_nav_links_to_liveness(viewer, fs_broker):
    html = viewer.get(reverse("receipts:overview")).content.decode()
    assert f'href="{URL}"' in html


def test_the_live_mirror_shows_on_liveness_and_in_metrics(viewer, fs_broker, read_token):
    from receipts_app.mirror.models import MirrorSource

    now = timeutil.now_ms()
    MirrorSource.objects.create(
        path="/srv/opensquilla/sessions.db", phase="following", heartbeat_at=now, lag_ms=2500
    )
    html = viewer.get(URL).content.decode()
    # A viewer reads the follower's state by gateway, not the path; an operator reads the path.
    assert "gateway <code>local</code>" in html
    assert "/srv/opensquilla/sessions.db" not in html
    assert "No mirror is running" not in html
    operator = Client()
    make_user("oskar", "operator")
    operator.login(username="oskar", password="pw-Secret-123")
    assert "/srv/opensquilla/sessions.db" in operator.get(URL).content.decode()
    metrics = Client().get("/metrics", HTTP_AUTHORIZATION=f"Bearer {read_token}")
    # A read-scope scraper sees the state, not the path: the source is its gateway's first.
    text = metrics.content.decode()
    assert 'opensquilla_mirror_lag_seconds{gateway="local",source="1"}' in text
    assert "/srv/opensquilla/sessions.db" not in text


def test_liveness_shows_each_supervised_process_and_its_restarts(viewer, settings, tmp_path):
    import json

    from opensquilla_site.gentle_stop import STATUS_FOLDER

    settings.VAR_DIR = tmp_path
    folder = tmp_path / STATUS_FOLDER
    folder.mkdir(parents=True)
    now = timeutil.now_ms()
    base = {"supervisor_pid": os.getpid(), "started_at": now - 120_000}
    worker = {"name": "worker", "state": "running", "restarts": 2}
    worker["last_exit"] = {"code": -9, "text": "signal SIGKILL", "at": now - 3 * 3600_000}
    (folder / "worker.json").write_text(json.dumps({**base, **worker}))
    (folder / "web.json").write_text(json.dumps({**base, "name": "web", "state": "running"}))
    gone = {**base, "name": "beat", "state": "running", "supervisor_pid": 2**22 + 7}
    (folder / "beat.json").write_text(json.dumps(gone))  # its make run was killed

    html = viewer.get(URL).content.decode()
    assert "<td><code>worker</code></td>" in html
    assert '<td class="num">2</td>' in html
    assert "signal SIGKILL, 3 h ago" in html
    beat_row = html[html.index("<td><code>beat</code></td>") :].split("</tr>")[0]
    assert "stopped" in beat_row


def test_liveness_shows_a_web_instance_restarting_while_the_other_runs(viewer, settings, tmp_path):
    import json

    from opensquilla_site.gentle_stop import STATUS_FOLDER

    settings.VAR_DIR = tmp_path
    folder = tmp_path / STATUS_FOLDER
    folder.mkdir(parents=True)
    now = timeutil.now_ms()
    killed = {"code": -9, "text": "signal SIGKILL", "at": now - 60_000, "instance": 1}
    instances = [
        {"number": 1, "pid": None, "state": "restarting", "restarts": 1, "last_exit": killed},
        {"number": 2, "pid": os.getpid(), "state": "running", "restarts": 0, "last_exit": None},
    ]
    web = {"name": "web", "state": "restarting", "restarts": 1, "last_exit": killed}
    web.update(supervisor_pid=os.getpid(), started_at=now - 120_000, instances=instances)
    (folder / "web.json").write_text(json.dumps(web))

    html = viewer.get(URL).content.decode()
    web_row = html[html.index("<td><code>web</code></td>") :].split("</tr>")[0]
    assert "restarting" in web_row and "1 of 2 instances running" in web_row
    assert "signal SIGKILL, 1 min ago" in web_row


def test_liveness_without_supervised_processes_says_who_reports_restarts(
    viewer, settings, tmp_path
):
    settings.VAR_DIR = tmp_path
    html = viewer.get(URL).content.decode()
    assert "restarts are your process manager" in html


def _process_row(html: str, name: str, process: str) -> str:
    at = html.index(f'data-process="{name}"', html.index(process) - 400)
    return html[at:].split("</tr>")[0]


def _edge_heartbeats() -> None:
    # What an edge host's worker and follower write from there (operations_app.pulse).
    from sessions_app.gateways import ensure_gateway

    ensure_gateway("b")
    ensure_gateway("c")
    now = timeutil.now_ms()
    supervised = {"name": "worker", "restarts": 3, "last_exit": "signal SIGKILL"}
    supervised["last_exit_at"] = now - 2 * 3600_000
    worker = {"host": "edge-b", "gateway": "b", "queues": ["gateway.b"], "supervisor": supervised}
    worker["pid"] = 4242
    heartbeats.mark_started("worker", "b@edge-b", worker)
    follower = {"host": "edge-b", "gateway": "b", "gateways": ["b"], "activity": "following"}
    follower["supervisor"] = {"name": "mirror", "restarts": 0}
    heartbeats.mark_started("mirror", "mirror-b@edge-b", follower)
    heartbeats.mark_started("worker", "c@edge-c", {"host": "edge-c", "gateway": "c"})
    Heartbeat.objects.filter(name="c@edge-c").update(seen_at=now - 3600_000)


def test_edge_processes_show_centrally_with_gateway_host_state_and_restarts(operator, fs_broker):
    _edge_heartbeats()
    html = operator.get(URL).content.decode()
    row = _process_row(html, "worker", "b@edge-b")
    assert "gateway b" in row and "edge-b" in row and "consumes gateway.b" in row
    assert ">running<" in row and '<td class="num">3</td>' in row
    assert "signal SIGKILL, 2 h ago" in row
    row = _process_row(html, "mirror", "mirror-b@edge-b")
    assert "gateway b" in row and "follows b" in row and ">running<" in row
    row = _process_row(html, "c@edge-c", "c@edge-c")
    assert "gateway c" in row and ">silent<" in row  # not heard from: not called running
    assert "not supervised" in row  # no restart record: the page does not invent one
    # The worker table and each gateway's live workers name them too.
    workers = html[html.index('id="workers-title"') : html.index('id="queues-title"')]
    assert "<code>b@edge-b</code>" in workers
    queues = html[html.index('id="gateway-queues-title"') : html.index('id="processes-title"')]
    assert "<code>b@edge-b</code>" in queues


def test_a_viewer_reads_each_processs_kind_gateway_state_and_restarts_not_its_host(
    viewer, fs_broker
):
    _edge_heartbeats()
    html = viewer.get(URL).content.decode()
    for detail in ("edge-b", "edge-c", "b@edge", "c@edge", "4242"):
        assert detail not in html, detail
    processes = html[html.index('id="processes-title"') : html.index('id="mirror-title"')]
    rows = processes.split("</tr>")
    [worker_b] = [r for r in rows if "gateway b" in r and "consumes gateway.b" in r]
    assert 'data-process="worker"' in worker_b and "worker · gateway b" in worker_b
    assert ">running<" in worker_b and '<td class="num">3</td>' in worker_b
    assert "signal SIGKILL, 2 h ago" in worker_b
    [mirror_b] = [r for r in rows if 'data-process="mirror"' in r]
    assert "mirror · gateway b" in mirror_b and "follows b" in mirror_b
    [worker_c] = [r for r in rows if "gateway c" in r]
    assert ">silent<" in worker_c and 'data-process="worker"' in worker_c
    workers = html[html.index('id="workers-title"') : html.index('id="queues-title"')]
    assert "gateway b" in workers and "gateway c" in workers
    queues = html[html.index('id="gateway-queues-title"') : html.index('id="processes-title"')]
    gateway_b = next(r for r in queues.split("</tr>") if 'data-gateway="b"' in r)
    assert "1 live" in gateway_b


def test_an_idle_mirror_process_reads_the_same_in_both_panels(
    viewer, fs_broker, settings, tmp_path
):
    import json

    from opensquilla_site.gentle_stop import STATUS_FOLDER
    from operations_app import pulse
    from receipts_app.mirror.process import announced

    # make run on a bare clone: the supervisor runs `run_mirror`, which has no source.
    settings.VAR_DIR = tmp_path
    folder = tmp_path / STATUS_FOLDER
    folder.mkdir(parents=True)
    status = {"name": "mirror", "state": "running", "restarts": 0, "supervisor_pid": os.getpid()}
    (folder / "mirror.json").write_text(json.dumps(status))
    spawned: list[pulse.Pulse] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENSQUILLA_SUPERVISED_AS", "mirror")
        mp.setenv("OPENSQUILLA_VAR_DIR", str(tmp_path))
        mp.setattr(pulse.Pulse, "_spawn", lambda self: spawned.append(self))
        with announced([]):  # what run_mirror does around its (idle) loop
            html = viewer.get(URL).content.decode()
    assert spawned, "the mirror process started its heartbeat"
    processes = html[html.index('id="processes-title"') : html.index('id="mirror-title"')]
    mirror = html[html.index('id="mirror-title"') :]
    assert ">running<" not in processes and ">idle<" in processes
    assert "follows nothing" in processes
    assert "No mirror is running" not in mirror
    assert "runs but follows nothing" in mirror
    # Stopped, it says so in both.
    html = viewer.get(URL).content.decode()
    assert "No mirror is running" in html[html.index('id="mirror-title"') :]
    processes = html[html.index('id="processes-title"') : html.index('id="mirror-title"')]
    assert ">stopped<" in processes and ">idle<" not in processes


def test_a_process_carries_its_supervisors_restarts_in_its_heartbeat(monkeypatch, tmp_path):
    """What lets an edge host's restarts show centrally: the process reads the status file
    its own supervisor writes on its host, and every beat carries it."""
    import json

    from opensquilla_site.gentle_stop import STATUS_FOLDER
    from operations_app import pulse

    folder = tmp_path / STATUS_FOLDER
    folder.mkdir(parents=True)
    killed = {"code": -9, "text": "signal SIGKILL", "at": 1_700_000_000_000}
    status = {"name": "worker", "state": "running", "restarts": 3, "last_exit": killed}
    (folder / "worker.json").write_text(json.dumps(status))
    monkeypatch.setenv("OPENSQUILLA_VAR_DIR", str(tmp_path))
    monkeypatch.setenv("OPENSQUILLA_SUPERVISED_AS", "worker")
    beat = pulse.Pulse("worker", "b@edge-b", lambda: {"gateway": "b", "queues": ["gateway.b"]})
    beat.beat()
    details = Heartbeat.objects.get(kind="worker", name="b@edge-b").details
    assert details["gateway"] == "b" and details["pid"] == os.getpid() and details["host"]
    assert details["supervisor"] == {
        "name": "worker",
        "restarts": 3,
        "last_exit": "signal SIGKILL",
        "last_exit_at": 1_700_000_000_000,
    }
    monkeypatch.delenv("OPENSQUILLA_SUPERVISED_AS")
    beat.beat()  # not supervised (another process manager): no restart record is invented
    assert "supervisor" not in Heartbeat.objects.get(name="b@edge-b").details
