"""Structured logs: one JSON object per line on stderr."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

LOGGER = "bcetune.service"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(getattr(record, "fields", {}))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)[-8000:]
        return json.dumps(doc, default=str)


class RateLimit(logging.Filter):
    """At most ``burst`` records of one message per ``window_s`` seconds; the first record after a quiet
    spell says how many were dropped (a client flooding bad requests cannot flood the log)."""

    def __init__(self, burst: int = 20, window_s: float = 10.0) -> None:
        super().__init__()
        self.burst, self.window_s = burst, window_s
        self.seen: dict[tuple[str, str], tuple[float, int, int]] = {}  # key -> (window start, kept, dropped)

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = time.monotonic()
        start, kept, dropped = self.seen.get(key, (now, 0, 0))
        if now - start >= self.window_s:
            if dropped:
                fields = dict(getattr(record, "fields", {}))
                fields["dropped_since_last"] = dropped
                record.fields = fields
            start, kept, dropped = now, 0, 0
        if kept >= self.burst:
            self.seen[key] = (start, kept, dropped + 1)
            return False
        self.seen[key] = (start, kept + 1, dropped)
        if len(self.seen) > 4096:  # messages are templates; a bound all the same
            self.seen.clear()
        return True


def setup(level: str) -> logging.Logger:
    log = logging.getLogger(LOGGER)
    if not any(isinstance(h.formatter, JsonFormatter) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        handler.addFilter(RateLimit())
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(level.upper())
    return log


def event(log: logging.Logger, level: int, msg: str, **fields: object) -> None:
    log.log(level, msg, extra={"fields": fields})


def uvicorn_log_config(level: str) -> dict[str, Any]:
    """uvicorn's own loggers as JSON lines too: start-up and protocol warnings rate-limited, access lines not."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"rate": {"()": RateLimit}},
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "filters": ["rate"],
                "stream": "ext://sys.stderr",
            },
            "access": {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.error": {"handlers": ["stderr"], "level": level.upper(), "propagate": False},
            "uvicorn.access": {"handlers": ["access"], "level": level.upper(), "propagate": False},
        },
    }
