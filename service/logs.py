"""Structured logs: one JSON object per line on stderr."""

from __future__ import annotations

import json
import logging
import sys
import time

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
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


def setup(level: str) -> logging.Logger:
    log = logging.getLogger(LOGGER)
    if not any(isinstance(h.formatter, JsonFormatter) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(JsonFormatter())
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(level.upper())
    return log


def event(log: logging.Logger, level: int, msg: str, **fields: object) -> None:
    log.log(level, msg, extra={"fields": fields})
