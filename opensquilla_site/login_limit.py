"""The sign-in limit: at most N attempts in any window of the rate's length, per name and per IP.

A sliding window, not fixed ones. With fixed windows (django-ratelimit's only kind) the count
starts again at each boundary: five wrong passwords just before it and the right one just
after got in, and ten guesses within two seconds passed a "5 per minute" limit. Here each
attempt is counted in a one-slot-per-second (for a minute; ``window / 60`` in general) ring of
cache counters, and an attempt is refused when the slots covering the last full window hold
more than the limit. The window is never shorter than the rate says (one slot longer at most).

Counters live in Django's default cache, which every web process shares (Redis in scale-out,
the filesystem under ``var/`` embedded). ``incr`` is atomic on Redis; on the filesystem cache
two simultaneous attempts may be counted once, which loosens the limit slightly on one machine
and never disables it.

A name and its look-alikes are one budget (``username_key``): case, surrounding whitespace and
Unicode compatibility forms (fullwidth letters, ligatures) are folded away, as Django's own
``normalize_username`` folds them before it looks the user up.
"""

from __future__ import annotations

import hashlib
import re
import time
import unicodedata
from dataclasses import dataclass

from django.core.cache import cache

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\w*\s*$", re.I)
_SLOTS = 60
PREFIX = "osq-login"


@dataclass(frozen=True)
class Rate:
    limit: int
    window_s: int

    @property
    def slot_s(self) -> int:
        return max(1, self.window_s // _SLOTS)


def parse_rate(text: str) -> Rate:
    """``"5/m"``, ``"20/h"``, ``"10/5m"`` (ten per five minutes) → ``Rate``; ValueError else."""
    match = _RATE.match(text or "")
    if not match:
        raise ValueError(f"a login rate reads like '5/m' or '20/10m'; got {text!r}")
    count, multiple, unit = match.groups()
    return Rate(limit=int(count), window_s=int(multiple or 1) * _UNITS[unit.lower()])


def username_key(raw: str) -> str:
    """One key for a name and its look-alikes: compatibility-normalised, case-folded, stripped
    (normalised again after folding, which can produce new compatibility characters)."""
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", raw).casefold())
    return folded.strip()


def _slot_key(scope: str, subject: str, slot: int) -> str:
    digest = hashlib.sha256(subject.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{PREFIX}:{scope}:{digest}:{slot}"


def attempt(scope: str, subject: str, rate: Rate, *, now: float | None = None) -> bool:
    """Count one attempt of ``subject``; True when, with it, the last window holds more than
    ``rate.limit`` attempts (the caller refuses it). Refused attempts count too, so a client
    that keeps trying stays refused until it pauses for a whole window."""
    moment = time.time() if now is None else now
    step = rate.slot_s
    current = int(moment // step)
    key = _slot_key(scope, subject, current)
    # Kept a little longer than the window, so every slot still counted is still there.
    cache.add(key, 0, timeout=rate.window_s + 2 * step)
    try:
        cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=rate.window_s + 2 * step)
    # Slots from one full window ago up to now: the window is covered whole (plus < 1 slot).
    slots = range(current - rate.window_s // step, current + 1)
    counted = cache.get_many([_slot_key(scope, subject, s) for s in slots])
    return sum(int(v) for v in counted.values()) > rate.limit
