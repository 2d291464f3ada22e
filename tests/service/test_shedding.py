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


DROP_COST = 0.0001  # a request refused at its start: its answer written, its body never read


def simulate(arrivals: list[tuple[float, float]], shedder: Shedder) -> list[tuple[float, int, float, bool]]:
    """``arrivals``: (gap since the previous arrival, service time). One server, FIFO, event by event: each
    arrival asked of the shedder; each admitted request, when the server takes it, told to the shedder,
    which may refuse it then (it costs DROP_COST instead of its service time). Returns, per arrival, (time,
    requests in flight then, seconds since the last start then, admitted at arrival); ``served_waits``
    collects what every request served waited."""
    queue: list[tuple[float, float]] = []  # (arrival, service) admitted, not started
    in_flight: list[float] = []  # finish times of started requests still running (a heap)
    server_free, last_start, now = 0.0, -1e9, 0.0
    out = []
    simulate.served_waits = []  # type: ignore[attr-defined]

    def run_until(t: float) -> None:
        nonlocal server_free, last_start
        while queue and max(server_free, queue[0][0]) <= t:
            arrived, service = queue.pop(0)
            start = max(server_free, arrived)
            last_start = start
            dropped = shedder.started(start, start - arrived)
            if not dropped:
                simulate.served_waits.append(start - arrived)  # type: ignore[attr-defined]
            server_free = start + (DROP_COST if dropped else service)
            heapq.heappush(in_flight, server_free)

    for gap, service in arrivals:
        now += gap
        run_until(now)
        while in_flight and in_flight[0] <= now:
            heapq.heappop(in_flight)
        waiting = len(in_flight) + len(queue)
        admitted = shedder.refusal(now, waiting) is None
        out.append((now, waiting, now - last_start, admitted))
        if admitted:
            queue.append((now, service))
    run_until(float("inf"))
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


def test_an_interval_after_the_last_start_is_not_fresh_whatever_the_rounding() -> None:
    """Hypothesis's find: a burst left the last start at 0.20918412268675568 s; an interval later, now - last
    start rounds to 0.09999999999999998 s, and a shedder comparing that difference still refused."""
    shedder = Shedder(TARGET, INTERVAL, CAP)
    assert not shedder.started(0.0, 0.2) and shedder.started(0.20918412268675568, 0.2)  # a standing queue
    assert shedder.refusal(0.20918412268675568 + INTERVAL, CAP - 1) is None


def test_a_standing_queue_is_refused_and_what_is_served_waited_little() -> None:
    """Arrivals at twice the service rate for two seconds: the queue stands, so requests are refused (at
    arrival, or at their start where they waited over the target); what is served waited at most the target
    and the interval, not the seconds an unbounded queue would reach; then idle, admitted."""
    shedder = Shedder(TARGET, INTERVAL, 10_000)
    out = simulate([(0.005, 0.01)] * 400, shedder)
    served = simulate.served_waits  # type: ignore[attr-defined]
    assert 150 < len(served) < 300, len(served)  # the server's capacity is 200 of the 400: the rest refused
    assert max(served) <= TARGET + INTERVAL + 0.01 + 1e-9, max(served)  # an unbounded queue: ~2 s
    assert shedder.refusal(out[-1][0] + 10.0, 0) is None


@settings(max_examples=300, deadline=None)
@given(traffic)
def test_what_is_served_waited_at_most_the_target_and_the_interval(arrivals: list[tuple[float, float]]) -> None:
    """Whatever the traffic, a served request waited at most target + interval and one request's service
    (the run of long waits must span an interval before the drops start)."""
    simulate(arrivals, Shedder(TARGET, INTERVAL, CAP))
    longest = max(service for _, service in arrivals)
    for waited in simulate.served_waits:  # type: ignore[attr-defined]
        assert waited <= TARGET + INTERVAL + longest + 1e-9, waited


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
