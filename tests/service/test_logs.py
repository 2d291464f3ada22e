"""service.logs: one JSON object per line with the event's fields, and a message repeated by a flood
kept to its burst per window, the first record after the window saying how many were dropped."""

from __future__ import annotations

import json
import logging

import pytest

from service import logs


def record(msg: str = "bad request from %s", **fields: object) -> logging.LogRecord:
    r = logging.LogRecord("bcetune.service", logging.WARNING, __file__, 1, msg, ("1.2.3.4",), None)
    r.fields = fields
    return r


def test_a_line_is_json_with_the_events_fields() -> None:
    doc = json.loads(logs.JsonFormatter().format(record(path="/tiling", status=422)))
    assert doc["level"] == "warning" and doc["msg"] == "bad request from 1.2.3.4"
    assert doc["path"] == "/tiling" and doc["status"] == 422 and doc["ts"].endswith("Z")


def test_a_flood_of_one_message_is_kept_to_its_burst_and_the_drop_is_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: now[0])
    limit = logs.RateLimit(burst=3, window_s=10.0)
    assert [limit.filter(record()) for _ in range(5)] == [True, True, True, False, False]
    assert limit.filter(record("another message"))  # each message has its own budget
    now[0] += 10.0
    after = record()
    assert limit.filter(after) and after.fields["dropped_since_last"] == 2
    nxt = record()
    assert limit.filter(nxt) and "dropped_since_last" not in nxt.fields


def test_setup_adds_its_handler_once() -> None:
    log = logging.getLogger(logs.LOGGER)
    level = log.level
    try:
        logs.setup("info")
        logs.setup("debug")
        assert sum(isinstance(h.formatter, logs.JsonFormatter) for h in log.handlers) == 1
        assert log.level == logging.DEBUG and not log.propagate
    finally:
        log.setLevel(level)
