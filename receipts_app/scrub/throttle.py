"""Keep a scrub's reads under a rate, so verifying never starves the gateway of its disk."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Throttle:
    """Sleeps after a read whenever the bytes read so far are ahead of ``rate`` per second
    (0: never sleeps). ``sleep`` and ``clock`` are injectable for tests."""

    def __init__(
        self,
        rate: float,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = rate
        self._sleep = sleep
        self._clock = clock
        self._start = clock()
        self.bytes = 0
        self.slept = 0.0
        # Several reader threads share one throttle; a reader that is ahead sleeps holding the
        # lock, so the others wait too and the rate holds for all of them together.
        self._lock = threading.Lock()

    def __call__(self, n: int) -> None:
        if self.rate <= 0:
            return  # unthrottled: no lock for the readers to queue on
        with self._lock:
            self.bytes += n
            ahead = self.bytes / self.rate - (self._clock() - self._start)
            if ahead > 0:
                self._sleep(ahead)
                self.slept += ahead
