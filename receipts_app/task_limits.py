"""Every task's time limits, and the recovery timings derived from them (one place).

A worker killed with ``kill -9`` leaves its task unacknowledged (``acks_late``). Two things
bring such work back, and both are timed from the limits below:
- Redis redelivers an unacknowledged message after ``VISIBILITY_TIMEOUT_SECONDS``: just longer
  than the longest hard limit, so a task that is still running is never handed to a second
  worker, and any lost task runs again within about that long (was a fixed hour).
- The lost-work sweep (``requeue/sweep.py``, run by every repair tick) re-sends a requeued
  checkpoint untouched for ``LOST_CHECKPOINT_AFTER_SECONDS`` (twice the checkpoint's hard
  limit: by then its task either finished or is gone) and a queued or stalled plan after
  ``LOST_PLAN_AFTER_SECONDS``. This also covers the embedded SQL broker, which never redelivers.
Plain numbers, no Django: settings read them before the apps load.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TimeLimit:
    soft: int  # SoftTimeLimitExceeded is raised in the task
    hard: int  # the worker process is killed


CHECKPOINT = TimeLimit(soft=150, hard=180)
FLUSH = TimeLimit(soft=300, hard=360)
REPAIR_RECEIPT = TimeLimit(soft=300, hard=360)
REPAIR_TICK = TimeLimit(soft=900, hard=960)
PLAN = TimeLimit(soft=300, hard=360)
# A scrub run stops itself after OPENSQUILLA_SCRUB_RUN_SECONDS (240) and resumes next time.
SCRUB = TimeLimit(soft=300, hard=360)
# The Celery defaults, for any task that names none.
DEFAULT = TimeLimit(soft=300, hard=360)

ALL = (CHECKPOINT, FLUSH, REPAIR_RECEIPT, REPAIR_TICK, PLAN, SCRUB, DEFAULT)
LONGEST_HARD_SECONDS = max(limit.hard for limit in ALL)
# Room for the worker to notice the hard limit and for clock skew between hosts.
MARGIN_SECONDS = 60

VISIBILITY_TIMEOUT_SECONDS = LONGEST_HARD_SECONDS + MARGIN_SECONDS
LOST_CHECKPOINT_AFTER_SECONDS = 2 * CHECKPOINT.hard
# A plan saves progress after every batch and runs in slices shorter than its soft limit.
LOST_PLAN_AFTER_SECONDS = 2 * PLAN.hard
