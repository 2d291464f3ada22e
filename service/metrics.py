"""Prometheus metrics: requests and latency by endpoint and status, tiling sources, reloads."""

from __future__ import annotations

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
        self.compiled = Gauge(
            "bcetune_compiled_model",
            "1 once the compiled cost model is warmed up (before: the NumPy model, same answers, slower)",
            registry=self.registry,
        )


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
