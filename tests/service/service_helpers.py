"""Helpers the service's tests share (a helper module: test modules import it, never each other): table
entries good and bad, a real ``python -m service`` on a free port, and a condition to wait for."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

from kernel.sources import kernel_source_hash
from tiling_model import Variant, load_soc
from tiling_model.tables import TableEntry, TuningTable

_TLS = ssl.create_default_context()

GOOD = {"block_bytes": 1024, "buffer_num": 2, "tile_bytes": 8192, "core_num": 40}
OTHER = {"block_bytes": 2048, "buffer_num": 1, "tile_bytes": 16384, "core_num": 32}
BROKEN = {"block_bytes": 512, "buffer_num": 2, "tile_bytes": 65536, "core_num": 48}  # overflows UB
INEXPRESSIBLE = {"block_bytes": 100, "buffer_num": 2, "tile_bytes": 8192, "core_num": 48}  # not a multiple of 32


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_table(entries: list[TableEntry], profile_hash: str | None = None) -> TuningTable:
    return TuningTable(
        "Ascend910B2",
        profile_hash or load_soc("Ascend910B2").profile_hash,
        kernel_source_hash(),
        "model",
        "2026-11-30T00:00:00+00:00",
        10,
        tuple(entries),
    )


def entry(dtype: str, reduction: str, size: int, params: dict) -> TableEntry:
    return TableEntry(Variant(dtype, reduction), size, params, 8.0, 9.0, 10)


class Server:
    def __init__(self, tables: Path, *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "service", "--port", str(self.port), "--tables", str(tables), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"service exited: {self.proc.stdout.read()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise RuntimeError("service did not come up")

    def post(self, path: str, body: object) -> httpx.Response:
        """One request on a connection of its own, as before; the TLS context (unused over http, but httpx
        builds one per call, loading the CA bundle: ~20 ms) is made once."""
        return httpx.post(self.url + path, json=body, timeout=30, verify=_TLS)

    def stop(self) -> str:
        self.proc.terminate()
        out, _ = self.proc.communicate(timeout=10)
        return out


def _wait_for(cond, timeout: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
