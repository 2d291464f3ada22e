"""When the service refuses a request at once (503 with Retry-After) instead of answering it late: a
CoDel-style rule on what requests actually waited, and a fixed bound on requests in flight.

The state is what the last requests to *start* waited (from their arrival, their headers parsed, to
their first step on the event loop) and when. A request arriving is refused only while

- the requests in flight are at ``max_in_flight`` (a fixed bound: a count that falls as they finish), or
- a **standing queue** is seen: every request that started for at least ``interval_s`` waited more than
  ``target_s``, and the latest of them started less than ``interval_s`` ago.

A request admitted at its arrival is refused at its start too where it waited over the target while
such a queue stands (CoDel's drop at dequeue), before its body is read: what is served has waited at most
about ``target_s + interval_s``. A burst is not a standing queue (its first requests start at once: the
run of waits over the target is broken). An idle server admits: nothing in flight, the request starts at
once; nothing started within ``interval_s``, the evidence has expired. While arrivals are refused nothing
new is admitted, so the queue drains, starts stop and the state can only age: it cannot lock itself shut,
whatever the traffic before (tests/service/test_shedding.py drives it through idle gaps, bursts and
recoveries with hypothesis). The rule replaces an estimated drain rate, which idle gaps drove towards
zero and which, once it refused everything, was never updated.

The state machine is pure (times are given, nothing is read from a clock) so that its properties can be
checked exhaustively; ``service.http`` feeds it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DEFAULT_TARGET_S = 0.1
DEFAULT_INTERVAL_S = 0.1
DEFAULT_MAX_IN_FLIGHT = 1024


@dataclass
class Shedder:
    target_s: float = DEFAULT_TARGET_S  # a wait from arrival to start a request may have (BCETUNE_SHED_WAIT)
    interval_s: float = DEFAULT_INTERVAL_S  # how long waits must stay over the target to be a standing queue
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT  # requests in flight per process (BCETUNE_MAX_ACTIVE)
    _above_since: float | None = field(default=None, init=False)  # start of the current run of long waits
    _last_start: float = field(default=-math.inf, init=False)

    def started(self, now: float, waited_s: float) -> bool:
        """A request starts at ``now`` having waited ``waited_s`` since it arrived. True: it is refused
        now, at its start (CoDel's drop at dequeue): it waited over the target in a standing queue."""
        self._last_start = max(self._last_start, now)
        if waited_s <= self.target_s:
            self._above_since = None
            return False
        if self._above_since is None:
            self._above_since = now
        return self.standing_queue(now)

    def standing_queue(self, now: float) -> bool:
        """Waits have stayed over the target for an interval, and the latest is fresh (the interval after it
        has not ended: compared as a deadline, so "an interval later" is never still fresh by a rounding of
        now - last start)."""
        since = self._above_since
        fresh = now < self._last_start + self.interval_s
        return since is not None and fresh and self._last_start - since >= self.interval_s

    def refusal(self, now: float, in_flight: int) -> str | None:
        """Why a request arriving at ``now`` with ``in_flight`` others in flight is refused; None: admitted."""
        if in_flight >= self.max_in_flight:
            return f"the server has {self.max_in_flight} requests in progress; retry shortly"
        if in_flight > 0 and self.standing_queue(now):
            return (
                f"requests have waited over {self.target_s:g} s to start for {self.interval_s:g} s at least; "
                "retry shortly"
            )
        return None
