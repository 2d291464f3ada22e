"""The NPU operator's device-tiling cache (kernel/npu_ext/tiling_cache.h), built and run on the host:
a bounded LRU that evicts the least recently used, counts hits and misses, and is safe across threads."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import compile_cpp_driver

CHECKS = (
    "miss_on_empty",
    "hit_returns_value",
    "evicts_least_recently_used",
    "keeps_recent",
    "put_replaces_in_place",
    "counts",
    "shrink_keeps_most_recent",
    "clear",
    "capacity_at_least_one",
    "concurrent",
)


def test_tiling_cache_is_a_bounded_thread_safe_lru(tmp_path: Path) -> None:
    exe = compile_cpp_driver("tiling_cache_driver.cpp", tmp_path)
    proc = subprocess.run([str(exe)], capture_output=True, text=True, check=False, timeout=120)
    results = dict(line.split(" ", 2)[:2] for line in proc.stdout.splitlines())
    assert set(results) == set(CHECKS), proc.stdout
    assert all(v == "ok" for v in results.values()), proc.stdout
    assert proc.returncode == 0
