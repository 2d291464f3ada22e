"""The seed scheme reproduces the requirement's host tiling, flaws included."""

from __future__ import annotations

import pytest

from tiling_model import TilingParams, Variant, compute_tiling, core_plan, validate


def _oob(t) -> list:
    return [v for v in validate(t) if v.kind == "out_of_bounds"]


def test_100_float32_one_core_28_elements_past_the_end() -> None:
    t = compute_tiling([100], Variant("float32", "none"), scheme="seed")
    assert t.block_dim == 1
    (core,) = core_plan(t)
    assert (core.start, core.count) == (0, 128)
    (v,) = _oob(t)
    assert v.count == 28 and "112 B" in v.message


def test_129_float32_two_cores_127_past_the_end() -> None:
    t = compute_tiling([129], Variant("float32", "none"), scheme="seed")
    assert t.block_dim == 2
    assert [c.count for c in core_plan(t)] == [128, 128]
    (v,) = _oob(t)
    assert v.count == 127


def test_128_float16_reads_a_whole_block() -> None:
    t = compute_tiling([128], Variant("float16", "none"), scheme="seed")
    (v,) = _oob(t)
    assert v.count == 128


@pytest.mark.parametrize("n,dtype", [(128, "float32"), (256, "float16"), (48 * 128 * 7, "float32"), (1 << 20, "int16")])
def test_exact_multiple_of_512_bytes_has_no_overrun(n: int, dtype: str) -> None:
    assert _oob(compute_tiling([n], Variant(dtype, "none"), scheme="seed")) == []


def test_seed_fields_for_1m_float16_by_hand() -> None:
    # 2 MiB = 4096 blocks of 512 B over 48 cores: 85 each, 16 big cores with 86.
    # tileBlockNum = 196608/512/2/5 = 38 -> 9728 half elements per tile.
    t = compute_tiling([1024, 1024], Variant("float16", "none"), scheme="seed")
    f = t.fields
    assert t.block_dim == 48
    assert (f.smallCoreDataNum, f.bigCoreDataNum, f.tailBlockNum) == (85 * 256, 86 * 256, 16)
    assert f.tileDataNum == 38 * 256
    assert (f.finalSmallTileNum, f.finalBigTileNum) == (3, 3)
    assert (f.smallTailDataNum, f.bigTailDataNum) == (85 * 256 - 2 * 9728, 86 * 256 - 2 * 9728)
    assert f.reduction == 0 and t.tiling_key % 10 == 0


def test_seed_mean_mode_and_grad_scalar_overread() -> None:
    t = compute_tiling([4096], Variant("float32", "mean"), scheme="seed")
    assert t.tiling_key % 10 == 1 and t.fields.reduction == 2
    [v] = [v for v in validate(t) if v.kind == "scalar_out_of_bounds"]
    assert v.count == 15 and "scalar grad read as 16 elements" in v.message
    assert _oob(t) == []  # 4096 float32 elements are whole 512-B blocks: no tensor is left


def test_seed_ub_plan_exceeds_the_reserved_ub() -> None:
    # 5 queues x 2 buffers x 19456 B = 194560 B: fits the raw 196608 B but not the 8448 B reserve.
    (v,) = [
        v
        for v in validate(compute_tiling([1 << 20], Variant("float32", "none"), scheme="seed"))
        if v.kind == "ub_overflow"
    ]
    assert "194560" in v.message


def test_seed_uint32_truncation_shows_as_coverage_loss() -> None:
    # One core and 2^33 int16 elements: the seed's uint32 smallCoreDataNum wraps around.
    t = compute_tiling([1 << 33], Variant("int16", "none"), TilingParams(core_num=1), scheme="seed")
    assert t.fields.smallCoreDataNum == 0
    assert any(v.kind == "coverage" for v in validate(t))


def test_empty_tensor_reproduces_the_seed_one_idle_core() -> None:
    t = compute_tiling([0, 7], Variant("float32", "sum"), scheme="seed")
    assert t.block_dim == 1 and [c.count for c in core_plan(t)] == [0]
    assert [v.kind for v in validate(t) if v.kind != "ub_overflow"] == []
