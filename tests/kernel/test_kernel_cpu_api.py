"""kernel.cpu's Python API: bad input is one clear error naming the argument; the twin is cached."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from kernel import cpu

F = np.float32


def arrays(n: int = 10, dtype: type = F) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.ones(n, dtype), np.full(n, 0.5, dtype), np.zeros(n, dtype)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda g, p, y: cpu.bce_grad(g, p, y[:5]), r"y shape \(5,\) differs from p shape \(10,\)"),
        (lambda g, p, y: cpu.bce_grad(g, p, y.astype(np.float16)), "y is float16 but p is float32"),
        (lambda g, p, y: cpu.bce_grad(g, p, y, reduction="sum"), r"reduction='sum' takes one scalar grad"),
        (lambda g, p, y: cpu.bce_grad(g[:3], p, y), r"reduction='none' needs grad of the input's shape"),
        (lambda g, p, y: cpu.bce_grad(g, p, y, np.ones(3, F)), r"weight of shape \[3\] does not broadcast to .*\[10\]"),
        (
            lambda g, p, y: cpu.bce_grad(g, p, y, pos_weight=np.ones(3, F)),
            r"pos_weight of shape \[3\] does not broadcast to the input's shape \[10\]",
        ),
        (
            lambda g, p, y: cpu.bce_grad(
                g.reshape(2, 5), p.reshape(2, 5), y.reshape(2, 5), pos_weight=np.ones((2, 1), F)
            ),
            r"pos_weight of shape \[2, 1\] broadcasts to \[2, 5\] as rows; the kernel reads pos_weight",
        ),
        (lambda g, p, y: cpu.bce_grad(*(a.astype(np.float64) for a in (g, p, y))), "unsupported dtype float64"),
        (lambda g, p, y: cpu.bce_grad(g, p, y, wrt="probability", pos_weight=g), "pos_weight applies to wrt='logit'"),
        (lambda g, p, y: cpu.bce_grad(g, p, y, reduction="avg"), "reduction"),
        (lambda g, p, y: cpu.bce_grad(*(a.astype(np.int32) for a in (g, p, y)), wrt="probability"), "float dtype"),
        (
            lambda g, p, y: cpu.bce_grad(g, p, y, cores=[5]),
            r"cores \[5\] are not block indices of this tiling \(0..0\)",
        ),
    ],
)
def test_bad_input_is_one_clear_error(call, message: str) -> None:  # noqa: ANN001
    with pytest.raises(ValueError, match=message):
        call(*arrays())


def test_empty_input_gives_an_empty_output() -> None:
    g, p, y = arrays(0)
    assert cpu.bce_grad(g, p, y).shape == (0,)


def test_twin_is_built_once_per_source_hash() -> None:
    cpu.library()
    cxx = shutil.which("g++") or "g++"
    built = cpu.cache_dir() / f"bce_grad_twin-launch-{cpu.source_hash(cxx)}.so"
    assert built.exists()
    mtime = built.stat().st_mtime_ns
    cpu.library()
    assert built.stat().st_mtime_ns == mtime


def test_each_flow_is_its_own_build() -> None:
    assert cpu.library().bce_twin_flow() == b"launch"
    assert cpu.library("op", "float16").bce_twin_flow() == b"op:half"
    assert cpu.library("op", "int32").bce_twin_flow() == b"op:int32_t"
    with pytest.raises(ValueError, match="one library per dtype"):
        cpu.library("op")
    with pytest.raises(ValueError, match="unknown build flow 'graph'"):
        cpu.library("graph")
