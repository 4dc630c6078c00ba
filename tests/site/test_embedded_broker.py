"""The embedded broker (a SQLite file): every message whole, and a lost file never fatal."""

from __future__ import annotations

import shutil

from kombu import Connection

from opensquilla_site import embedded_broker


def test_a_deleted_broker_file_and_folder_are_recreated_and_publishing_goes_on(tmp_path):
    folder = tmp_path / "var"
    url = embedded_broker.default_url(folder)
    with Connection(url) as producer_side, Connection(url) as consumer_side:
        sent = producer_side.SimpleQueue("jobs")
        received = consumer_side.SimpleQueue("jobs")
        sent.put({"n": 1})
        message = received.get(timeout=5)
        assert message.payload == {"n": 1}
        message.ack()

        shutil.rmtree(folder)  # what moving var/ away, or a clean-up script, does

        sent.put({"n": 2})  # neither process restarts: the file comes back with its tables
        assert embedded_broker.database_path(url).exists()
        message = received.get(timeout=5)
        assert message.payload == {"n": 2}
        message.ack()
        sent.close()
        received.close()
    assert embedded_broker.queue_depths(url) == {"jobs": 0}


def test_delivered_messages_are_pruned_and_waiting_ones_kept(tmp_path):
    url = embedded_broker.default_url(tmp_path)
    with Connection(url) as conn:
        queue = conn.SimpleQueue("jobs")
        for n in range(3):
            queue.put({"n": n})
        queue.get(timeout=5).ack()
        queue.close()
    assert embedded_broker.prune_delivered(url, keep_seconds=3600) == 0  # delivered just now
    assert embedded_broker.prune_delivered(url, keep_seconds=-60) == 1
    assert embedded_broker.queue_depths(url) == {"jobs": 2}


RACER = """
import sys, time
from kombu import Connection
from opensquilla_site import embedded_broker
embedded_broker.register()
start_at = float(sys.argv[2])
time.sleep(max(0.0, start_at - time.time()))  # every racer opens the fresh file at once
with Connection(sys.argv[1]) as conn:
    queue = conn.SimpleQueue("celery")
    queue.put({"from": sys.argv[3]})
    queue.close()
"""


def test_processes_starting_together_on_a_fresh_file_all_start(tmp_path):
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    url = embedded_broker.default_url(tmp_path)
    start_at = str(time.time() + 3)
    env = {**os.environ, "PYTHONPATH": str(repo)}
    racers = [
        subprocess.Popen(  # noqa: S603 - our own interpreter
            [sys.executable, "-c", RACER, url, start_at, str(n)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for n in range(6)
    ]
    errors = [r.stderr.read().decode() for r in racers if r.wait(timeout=60) != 0]
    assert errors == []  # kombu alone: "UNIQUE constraint failed: kombu_queue.name"
    assert embedded_broker.queue_depths(url) == {"celery": 6}


TAKER = """
import json, sys
from queue import Empty
from kombu import Connection
from opensquilla_site import embedded_broker
embedded_broker.register()
taken = []
with Connection(sys.argv[1]) as conn:
    channel = conn.default_channel
    while True:
        try:
            taken.append(channel.message_to_python(channel._get("jobs")).decode()["n"])
        except Empty:
            break
print(json.dumps(taken))
"""


def test_readers_in_several_processes_take_every_message_once_in_order(tmp_path):
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    url = embedded_broker.default_url(tmp_path)
    with Connection(url) as conn:
        queue = conn.SimpleQueue("jobs")
        for n in range(300):
            queue.put({"n": n})
        queue.close()
    env = {**os.environ, "PYTHONPATH": str(repo)}
    takers = [
        subprocess.Popen(  # noqa: S603 - our own interpreter
            [sys.executable, "-c", TAKER, url], env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(3)
    ]
    outputs = [taker.communicate(timeout=120)[0] for taker in takers]
    taken = [json.loads(out) for out in outputs]
    everything = sorted(n for one in taken for n in one)
    assert everything == list(range(300))  # each message taken once, none lost
    for one in taken:
        assert one == sorted(one)  # each reader gets them oldest first
    assert embedded_broker.queue_depths(url) == {"jobs": 0}
    assert embedded_broker.waiting_task_ids(url, ["jobs"]) == set()
