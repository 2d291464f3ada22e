"""The Python TilingData and the kernel's C++ tiling struct agree field for field and byte for byte."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import kernel
from tiling_model import TilingFields, TilingParams, Variant, compute_tiling

HEADER_DIR = kernel.TILING_HEADER.parent

READER = r"""
#include <cstdio>
#include <cstddef>
#include "bce_grad_tiling_data.h"
#define F(name) std::printf("%s %zu %lld\n", #name, offsetof(BceGradTilingData, name), (long long)t.name);
int main() {
    BceGradTilingData t;
    if (std::fread(&t, 1, sizeof t, stdin) != sizeof t) return 1;
    std::printf("sizeof %zu 0\n", sizeof t);
    F(totalLength) F(smallCoreDataNum) F(bigCoreDataNum) F(finalBigTileNum) F(finalSmallTileNum)
    F(tileDataNum) F(smallTailDataNum) F(bigTailDataNum) F(tailBlockNum) F(reduction)
    F(lastCoreDataNum) F(lastCoreTileNum) F(lastCoreTailDataNum) F(scaleBits) F(posWeightClasses) F(tilingKey)
    return 0;
}
"""


def test_header_declares_the_python_fields_in_order() -> None:
    fields = kernel.tiling_struct_fields()
    assert [name for _, name in fields] == list(TilingFields.names())
    assert {ty for ty, _ in fields} == {"int64_t"}


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ not installed")
    d = tmp_path_factory.mktemp("reader")
    (d / "reader.cpp").write_text(READER)
    exe = d / "reader"
    subprocess.run([cxx, "-std=c++17", "-I", str(HEADER_DIR), str(d / "reader.cpp"), "-o", str(exe)], check=True)
    return exe


@pytest.mark.parametrize(
    "shape,dtype,reduction,params,scheme",
    [
        ([1024, 1024], "float16", "mean", None, "exact"),
        ([129], "float32", "none", None, "seed"),
        ([3, 1000003], "bfloat16", "sum", TilingParams(2048, 1, 8192, 7), "exact"),
        ([1 << 34], "int16", "none", TilingParams(core_num=3), "exact"),
    ],
)
def test_cpp_reads_the_bytes_python_writes(reader: Path, shape, dtype, reduction, params, scheme) -> None:
    t = compute_tiling(shape, Variant(dtype, reduction), params, scheme=scheme)
    out = subprocess.run([str(reader)], input=t.to_bytes(), capture_output=True, check=True).stdout.decode()
    rows = [line.split() for line in out.splitlines()]
    assert rows[0] == ["sizeof", str(len(t.to_bytes())), "0"]
    expected = t.field_dict()
    for i, (name, offset, value) in enumerate(rows[1:]):
        assert int(offset) == 8 * i
        assert int(value) == expected[name], name


@pytest.mark.parametrize(
    ("shape", "variant", "period", "tensors"),
    [  # (elements of every tensor the launch touches, by hand)
        ([1000, 64], Variant("float32", "none"), None, 5 * 64000),  # grad, p, y, weight, z
        ([1000, 64], Variant("float32", "mean"), None, 4 * 64000 + 1),  # grad is one value
        ([1000, 64], Variant("float16", "none", "none", "full"), None, 5 * 64000),  # pos_weight for the weight
        ([1000, 64], Variant("float16", "none", "last_dim", "last_dim"), 64, 4 * 64000 + 64 + 64),
        ([1000, 64], Variant("float32", "sum", "rows"), 64, 3 * 64000 + 1000 + 1),  # a value per row of 64
        ([1000, 64], Variant("float32", "none", "scalar"), None, 4 * 64000 + 1),
        ([0, 64], Variant("float32", "none"), None, 0),
    ],
)
def test_device_bytes_counts_every_tensor_and_the_workspace(
    shape: list[int], variant: Variant, period: int | None, tensors: int
) -> None:
    t = compute_tiling(shape, variant, TilingParams(), "Ascend910B2", "exact", period)
    assert t.device_bytes == tensors * t.elem_bytes + t.workspace_bytes
    assert (t.workspace_bytes > 0) == ("last_dim" in (variant.weight, variant.pos_weight) and shape[0] > 0)
