"""The shedding state machine (service.shedding) driven through idle gaps, bursts and recoveries: a
single-server FIFO queue simulated event by event, every arrival asked of the shedder, every start told
to it. What must hold whatever the traffic: an idle server admits; refusals end by themselves; a
standing queue is refused; a burst is not."""

from __future__ import annotations

import heapq

from hypothesis import given, settings
from hypothesis import strategies as st

from service.shedding import Shedder

TARGET, INTERVAL, CAP = 0.1, 0.1, 64


def simulate(arrivals: list[tuple[float, float]], shedder: Shedder) -> list[tuple[float, int, float, bool]]:
    """``arrivals``: (gap since the previous arrival, service time). One server, FIFO. Returns, per arrival,
    (time, requests in flight then, seconds since the last start then, admitted)."""
    now = 0.0
    server_free = 0.0  # when the server finishes what it has admitted
    in_flight: list[float] = []  # finish times of admitted requests (a heap)
    starts: list[tuple[float, float]] = []  # (start time, wait) not yet told to the shedder (a heap)
    last_start = -1e9
    out = []
    for gap, service in arrivals:
        now += gap
        while starts and starts[0][0] <= now:  # starts happen in time order, before this arrival
            t, wait = heapq.heappop(starts)
            shedder.started(t, wait)
            last_start = max(last_start, t)
        while in_flight and in_flight[0] <= now:
            heapq.heappop(in_flight)
        admitted = shedder.refusal(now, len(in_flight)) is None
        out.append((now, len(in_flight), now - last_start, admitted))
        if admitted:
            start = max(now, server_free)
            server_free = start + service
            heapq.heappush(in_flight, server_free)
            heapq.heappush(starts, (start, start - now))
    return out


traffic = st.lists(
    st.tuples(
        st.one_of(st.just(0.0), st.floats(0.0, 0.01), st.floats(0.0, 3.0)),  # bursts, steady, idle gaps
        st.floats(0.0001, 0.05),
    ),
    min_size=1,
    max_size=400,
)


@settings(max_examples=300, deadline=None)
@given(traffic)
def test_an_idle_server_admits_whatever_came_before(arrivals: list[tuple[float, float]]) -> None:
    for now, in_flight, since_start, admitted in simulate(arrivals, Shedder(TARGET, INTERVAL, CAP)):
        if in_flight == 0 or (in_flight < CAP and since_start >= INTERVAL):
            assert admitted, (now, in_flight, since_start)


@settings(max_examples=300, deadline=None)
@given(traffic, st.floats(INTERVAL, 100.0))
def test_refusals_end_by_themselves(arrivals: list[tuple[float, float]], later: float) -> None:
    """Whatever state the traffic left, with nothing starting for an interval the next request is admitted
    (refusals start nothing: the evidence ages out), even with others in flight."""
    shedder = Shedder(TARGET, INTERVAL, CAP)
    simulate(arrivals, shedder)
    last = max(shedder._last_start, 0.0) + sum(g for g, _ in arrivals)
    assert shedder.refusal(last + later, CAP - 1) is None


def test_a_standing_queue_is_refused_and_recovery_follows() -> None:
    """Arrivals at twice the service rate for two seconds: the queue stands, so requests are refused; what
    is admitted waits about the target, not the seconds an unbounded queue would reach; then idle, admitted."""
    shedder = Shedder(TARGET, INTERVAL, 10_000)
    arrivals = [(0.005, 0.01)] * 400
    out = simulate(arrivals, shedder)
    refused = sum(not a for *_, a in out)
    assert refused > 100, refused
    server_free, worst = 0.0, 0.0  # replay the admitted ones: their waits
    for (now, _, _, admitted), (_, service) in zip(out, arrivals, strict=True):
        if admitted:
            start = max(now, server_free)
            worst = max(worst, start - now)
            server_free = start + service
    assert worst < 4 * (TARGET + INTERVAL), worst  # an unbounded queue: ~2 s
    assert shedder.refusal(out[-1][0] + INTERVAL, 0) is None


def test_a_burst_is_admitted_whole_and_light_traffic_after_it() -> None:
    """200 requests at once on an idle server (0.4 s of work: the last waits 0.4 s), then a health check every
    0.5 s: every one admitted (a burst arrives before any of it starts; the queue it leaves is gone when the
    next check comes). A request arriving while such a queue still stands is refused: see above."""
    out = simulate([(0.0, 0.002)] * 200 + [(0.5, 0.001)] * 40, Shedder(TARGET, INTERVAL, 10_000))
    assert all(a for *_, a in out)


def test_the_in_flight_bound_refuses_past_it_and_only_past_it() -> None:
    s = Shedder(TARGET, INTERVAL, 4)
    assert s.refusal(0.0, 3) is None
    assert "4 requests in progress" in (s.refusal(0.0, 4) or "")
