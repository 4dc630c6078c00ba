"""A web process (no worker, no beat) knows every task it publishes by name.

Celery's autodiscovery imports task modules only in a worker or beat; ``receipts_app.enqueue``,
the alert deliveries and the gateway link's repair runs publish by registered name, so without the apps importing their
``tasks`` a console requeue failed with NotRegistered after commit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROBE = """
import json, os
os.environ["DJANGO_SETTINGS_MODULE"] = "opensquilla_site.settings"
import django
django.setup()
from opensquilla_site.celery import app
from receipts_app import enqueue
from operations_app.alerts.delivery import DELIVER_TASK
from operations_app.gateway_link.service import REPAIR_RUN_TASK
names = [enqueue.task_name(short) for short in enqueue.TASKS] + [DELIVER_TASK, REPAIR_RUN_TASK]
print(json.dumps({name: name in app.tasks for name in names}))
"""


def test_a_fresh_web_process_has_every_published_task_registered():
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    registered = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(registered) > 3
    assert all(registered.values()), registered
