"""Service settings: flags set them, environment variables (BCETUNE_*) carry them to workers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from service.trust import TrustedProxies
from tiling_model import known_socs

SHIPPED_TABLES = Path(__file__).resolve().parent / "tables"


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    workers: int = 1
    tables_dir: Path = SHIPPED_TABLES
    default_soc: str = "Ascend910B2"
    log_level: str = "info"
    reload_interval_s: float = 2.0  # poll the tables directory for changes; 0 disables (SIGHUP still works)
    max_body_bytes: int = 65536
    max_batch: int = 256
    bench_endpoints: bool = False  # a trivial POST for the load benchmark's baseline
    max_header_bytes: int = 16384  # request line + headers (h11's default); over it: 431, connection closed
    request_timeout_s: float = 10.0  # a request must arrive complete this long after its connection or first byte
    keepalive_timeout_s: int = 5  # idle keep-alive connections close after this
    max_connections: int = 1000  # open connections per worker; past it a request gets a 503 (Retry-After)
    batch_budget_s: float = 2.0  # server time one batch may spend on answers not cached yet; past it: 503
    max_active: int = 1024  # requests in progress per worker; past it a request gets a 503 at once (Retry-After)
    shed_wait_s: float = 0.1  # a request's own wait to start; over it for shed_interval_s: 503 at once
    shed_interval_s: float = 0.1  # how long waits must stay over shed_wait_s to be a standing queue
    per_address_connections: int = 256  # open connections per client address; past it: 503 (0: no limit)
    per_address_requests: int = 128  # requests in progress per client address, arriving ones too; 429 (0: none)
    send_timeout_s: float = 10.0  # answers left unread (socket buffer full) this long: the connection closes
    cache_mb: int = 64  # the answer cache's bound, MiB (answers and refusals counted in bytes)
    repeat_cache_mb: int = 8  # repeated /tiling bodies' answers kept by their bytes (service.repeats), MiB; 0: off
    forwarded_allow_ips: str = ""  # proxies whose X-Forwarded-For is believed (comma-separated, "*"); none
    heavy_workers: int = 1  # worker processes for explanations and pictures (service.scheduler)
    per_client: int = 4  # explanations, pictures and batches one client address may have in flight; past it: 429
    max_queued: int = 32  # explanations and pictures waiting for a worker; past it: 503
    heavy_share: float = 0.1  # of a core: what batches, explanations and pictures get while others wait
    shutdown_grace_s: int = 5  # on SIGTERM, requests under way get this long to finish; then they are cancelled

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        d = cls()
        s = cls(
            host=env.get("BCETUNE_HOST", d.host),
            port=int(env.get("BCETUNE_PORT", d.port)),
            workers=int(env.get("BCETUNE_WORKERS", d.workers)),
            tables_dir=Path(env.get("BCETUNE_TABLES") or d.tables_dir),
            default_soc=env.get("BCETUNE_DEFAULT_SOC", d.default_soc),
            log_level=env.get("BCETUNE_LOG_LEVEL", d.log_level),
            reload_interval_s=float(env.get("BCETUNE_RELOAD_INTERVAL", d.reload_interval_s)),
            max_body_bytes=int(env.get("BCETUNE_MAX_BODY", d.max_body_bytes)),
            max_batch=int(env.get("BCETUNE_MAX_BATCH", d.max_batch)),
            bench_endpoints=env.get("BCETUNE_BENCH_ENDPOINTS", "") in ("1", "true"),
            max_header_bytes=int(env.get("BCETUNE_MAX_HEADER_BYTES", d.max_header_bytes)),
            request_timeout_s=float(env.get("BCETUNE_REQUEST_TIMEOUT", d.request_timeout_s)),
            keepalive_timeout_s=int(env.get("BCETUNE_KEEPALIVE_TIMEOUT", d.keepalive_timeout_s)),
            max_connections=int(env.get("BCETUNE_MAX_CONNECTIONS", d.max_connections)),
            batch_budget_s=float(env.get("BCETUNE_BATCH_BUDGET", d.batch_budget_s)),
            max_active=int(env.get("BCETUNE_MAX_ACTIVE", d.max_active)),
            shed_wait_s=float(env.get("BCETUNE_SHED_WAIT", d.shed_wait_s)),
            shed_interval_s=float(env.get("BCETUNE_SHED_INTERVAL", d.shed_interval_s)),
            per_address_connections=int(env.get("BCETUNE_PER_ADDRESS_CONNECTIONS", d.per_address_connections)),
            per_address_requests=int(env.get("BCETUNE_PER_ADDRESS_REQUESTS", d.per_address_requests)),
            send_timeout_s=float(env.get("BCETUNE_SEND_TIMEOUT", d.send_timeout_s)),
            cache_mb=int(env.get("BCETUNE_CACHE_MB", d.cache_mb)),
            repeat_cache_mb=int(env.get("BCETUNE_REPEAT_CACHE_MB", d.repeat_cache_mb)),
            forwarded_allow_ips=env.get("BCETUNE_FORWARDED_ALLOW_IPS", d.forwarded_allow_ips),
            heavy_workers=int(env.get("BCETUNE_HEAVY_WORKERS", d.heavy_workers)),
            per_client=int(env.get("BCETUNE_PER_CLIENT", d.per_client)),
            max_queued=int(env.get("BCETUNE_MAX_QUEUED", d.max_queued)),
            # BCETUNE_BATCH_SHARE: its name before it was every expensive request's share, still read
            heavy_share=float(env.get("BCETUNE_HEAVY_SHARE") or env.get("BCETUNE_BATCH_SHARE") or d.heavy_share),
            shutdown_grace_s=int(env.get("BCETUNE_SHUTDOWN_GRACE", d.shutdown_grace_s)),
        )
        s.check()
        return s

    def to_env(self) -> dict[str, str]:
        return {
            "BCETUNE_HOST": self.host,
            "BCETUNE_PORT": str(self.port),
            "BCETUNE_WORKERS": str(self.workers),
            "BCETUNE_TABLES": str(self.tables_dir),
            "BCETUNE_DEFAULT_SOC": self.default_soc,
            "BCETUNE_LOG_LEVEL": self.log_level,
            "BCETUNE_RELOAD_INTERVAL": str(self.reload_interval_s),
            "BCETUNE_MAX_BODY": str(self.max_body_bytes),
            "BCETUNE_MAX_BATCH": str(self.max_batch),
            "BCETUNE_BENCH_ENDPOINTS": "1" if self.bench_endpoints else "",
            "BCETUNE_MAX_HEADER_BYTES": str(self.max_header_bytes),
            "BCETUNE_REQUEST_TIMEOUT": str(self.request_timeout_s),
            "BCETUNE_KEEPALIVE_TIMEOUT": str(self.keepalive_timeout_s),
            "BCETUNE_MAX_CONNECTIONS": str(self.max_connections),
            "BCETUNE_BATCH_BUDGET": str(self.batch_budget_s),
            "BCETUNE_MAX_ACTIVE": str(self.max_active),
            "BCETUNE_SHED_WAIT": str(self.shed_wait_s),
            "BCETUNE_SHED_INTERVAL": str(self.shed_interval_s),
            "BCETUNE_PER_ADDRESS_CONNECTIONS": str(self.per_address_connections),
            "BCETUNE_PER_ADDRESS_REQUESTS": str(self.per_address_requests),
            "BCETUNE_SEND_TIMEOUT": str(self.send_timeout_s),
            "BCETUNE_CACHE_MB": str(self.cache_mb),
            "BCETUNE_REPEAT_CACHE_MB": str(self.repeat_cache_mb),
            "BCETUNE_FORWARDED_ALLOW_IPS": self.forwarded_allow_ips,
            "BCETUNE_HEAVY_WORKERS": str(self.heavy_workers),
            "BCETUNE_PER_CLIENT": str(self.per_client),
            "BCETUNE_MAX_QUEUED": str(self.max_queued),
            "BCETUNE_HEAVY_SHARE": str(self.heavy_share),
            "BCETUNE_SHUTDOWN_GRACE": str(self.shutdown_grace_s),
        }

    def check(self) -> None:
        if self.default_soc not in known_socs():
            raise ValueError(f"default SoC {self.default_soc!r} unknown; known: {', '.join(known_socs())}")
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port {self.port} out of range 1..65535")
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.max_body_bytes < 1024 or self.max_batch < 1 or self.reload_interval_s < 0:
            raise ValueError("max body must be >= 1024 B, max batch >= 1, reload interval >= 0")
        if self.max_header_bytes < 1024 or self.request_timeout_s <= 0 or self.keepalive_timeout_s < 1:
            raise ValueError("max header must be >= 1024 B, request timeout > 0 s, keep-alive timeout >= 1 s")
        if self.max_connections < 1 or self.batch_budget_s <= 0:
            raise ValueError("max connections must be >= 1 and the batch budget > 0 s")
        if self.max_active < 1 or self.shed_wait_s <= 0 or self.shed_interval_s <= 0:
            raise ValueError("max active must be >= 1, the shedding wait and interval > 0 s")
        if self.cache_mb < 1:
            raise ValueError("the answer cache must have 1 MiB at least")
        if self.repeat_cache_mb < 0:
            raise ValueError("the repeat cache must be >= 0 MiB (0: off)")
        if self.per_address_connections < 0 or self.per_address_requests < 0 or self.send_timeout_s <= 0:
            raise ValueError("per-address connections and requests must be >= 0 (0: no limit), send timeout > 0 s")
        try:
            TrustedProxies(self.forwarded_allow_ips)
        except ValueError as e:
            raise ValueError(f"forwarded-allow-ips {self.forwarded_allow_ips!r}: {e}") from None
        if self.heavy_workers < 1 or self.per_client < 1 or self.max_queued < 0 or not 0 < self.heavy_share < 1:
            raise ValueError("heavy workers and per-client share must be >= 1, max queued >= 0, heavy share in (0, 1)")
        if self.shutdown_grace_s < 0:
            raise ValueError("the shutdown grace must be >= 0 s")
        if self.log_level not in ("critical", "error", "warning", "info", "debug"):
            raise ValueError(f"log level {self.log_level!r} is not one of critical, error, warning, info, debug")
