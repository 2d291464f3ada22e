"""Prometheus metrics: requests and latency by endpoint and status, tiling sources, reloads, the
scheduler's jobs by outcome and the garbage collector's pauses."""

from __future__ import annotations

import gc
import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "bcetune_requests_total", "HTTP requests", ["endpoint", "method", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "bcetune_request_seconds",
            "HTTP request latency",
            ["endpoint", "method", "status"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )
        self.sources = Counter(
            "bcetune_tiling_source_total", "tilings served by source", ["source"], registry=self.registry
        )
        self.reloads = Counter(
            "bcetune_table_reloads_total", "table reloads by result", ["result"], registry=self.registry
        )
        self.reload_error = Gauge(
            "bcetune_table_reload_error_timestamp_seconds",
            "when the last reload was refused (Unix time; absent after a good one), by the file it names",
            ["file"],
            registry=self.registry,
        )
        self.jobs = Counter(
            "bcetune_scheduler_jobs_total",
            "explanations and pictures by outcome (done, cancelled: the client left while it waited, failed)",
            ["outcome"],
            registry=self.registry,
        )
        self.gc_pauses = Histogram(
            "bcetune_gc_pause_seconds",
            "garbage-collection pauses of the serving process",
            registry=self.registry,
            buckets=(0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
        )
        self.gc_pause_max = Gauge(
            "bcetune_gc_pause_max_seconds", "the longest garbage-collection pause so far", registry=self.registry
        )
        self._gc_start = self._gc_max = 0.0

    def reload_outcome(self, ok: bool, error: Any) -> None:
        """A reload's result; ``error``: the store's last error (file, at) after a refused one."""
        self.reloads.labels("ok" if ok else "refused").inc()
        self.reload_error.clear()
        if not ok and error is not None:
            self.reload_error.labels(error.file or "").set(error.at)

    def watch_gc(self) -> None:
        """Time every collection of this process (gc.callbacks: a start and a stop per collection)."""
        if self._on_gc not in gc.callbacks:
            gc.callbacks.append(self._on_gc)

    def unwatch_gc(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, _info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        pause = time.perf_counter() - self._gc_start
        self.gc_pauses.observe(pause)
        if pause > self._gc_max:
            self._gc_max = pause
            self.gc_pause_max.set(pause)


class MetricsMiddleware:
    """Pure ASGI middleware timing every HTTP request; labels use the route template, not the raw path."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = {"code": 500}

        async def recording_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = scope.get("route")
            endpoint = getattr(route, "path", None) or "unmatched"
            labels = (endpoint, scope["method"], str(status["code"]))
            self.metrics.requests.labels(*labels).inc()
            self.metrics.latency.labels(*labels).observe(time.perf_counter() - start)
