"""Each rule of the tiling model at its boundary, with its kind, count and message: the checks that a
valid exact-scheme tiling never trips, so only fabricated tilings and bad input reach them. Written
against the mutants that survived a mutmut run over tiling_model (docs/mutation-testing.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st
from strategies import SOCS, period, sizes, variants

from tiling_model import (
    BadRequest,
    BcetuneError,
    TilingError,
    TilingParams,
    UnsupportedError,
    Variant,
    compute_tiling,
    core_plan,
    element_count,
    every_variant,
    load_soc,
    params_from_dict,
    validate,
)
from tiling_model.kernels import elementwise_kernel
from tiling_model.tiling import tile_kernel

SOC = load_soc("Ascend910B2")


def kinds(t) -> list[tuple[str, int | None]]:  # noqa: ANN001
    return [(v.kind, v.count) for v in validate(t)]


@pytest.mark.parametrize(
    ("knob", "value"), [("core_num", 0), ("buffer_num", True), ("tile_bytes", 2.5), ("block_bytes", -32)]
)
def test_knob_domains_are_refused_naming_the_knob(knob: str, value: object) -> None:
    with pytest.raises(TilingError, match=rf"^{knob} must be a positive integer, got {value!r}$"):
        compute_tiling([100], Variant("float32"), TilingParams(**{knob: value}))


def test_knobs_a_tiling_cannot_express_name_the_rule() -> None:
    with pytest.raises(TilingError, match=r"^block_bytes=48 is not a multiple of 32"):
        compute_tiling([100], Variant("float32"), TilingParams(block_bytes=48))
    with pytest.raises(TilingError, match=r"^tile_bytes=1026 is not a multiple of the float32 size \(4 B\)$"):
        compute_tiling([100], Variant("float32"), TilingParams(tile_bytes=1026))
    with pytest.raises(TilingError, match=r"whole blocks: tile_bytes=1024 is not a multiple of block_bytes=2048$"):
        compute_tiling([100], Variant("float32"), TilingParams(block_bytes=2048, tile_bytes=1024), scheme="seed")


def test_shape_domain() -> None:
    assert element_count([49, 73, 127, 337, 92737, 649657]) == 2**63 - 1  # exactly int64's maximum: allowed
    with pytest.raises(TilingError, match=r"^element count 9223372036854775808 exceeds int64$"):
        element_count([2**32, 2**31])
    with pytest.raises(TilingError, match=r"^shape\[1\] must be an integer, got True$"):
        element_count([3, True])
    with pytest.raises(TilingError, match=r"^shape\[0\] must be an integer, got 2.0$"):
        element_count([2.0])
    with pytest.raises(TilingError, match=r"^shape\[2\] is negative \(-1\)$"):
        element_count([1, 2, -1])


def test_scheme_and_last_dim_rules() -> None:
    with pytest.raises(TilingError, match=r"^unknown scheme 'fast'; known: seed, exact$"):
        compute_tiling([8], Variant("float32"), scheme="fast")  # type: ignore[arg-type]
    with pytest.raises(TilingError, match=r"^pos_weight='last_dim' needs a last dim >= 1$"):
        compute_tiling([], Variant("float32", pos_weight="last_dim"))
    t = compute_tiling([7, 1], Variant("float32", pos_weight="last_dim"))  # C = 1 is a class count
    assert t.fields.posWeightClasses == 1 and validate(t) == []
    with pytest.raises(TilingError, match="the seed scheme is the requirement's kernel"):
        compute_tiling([8], Variant("float32", weight=False), scheme="seed")


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("float64", "none"), r"^unknown dtype 'float64'; supported: float32, float16, bfloat16, int32, int16$"),
        (("float32", "max"), r"^unknown reduction 'max'; supported: none, sum, mean$"),
        (("int16", "sum"), r"^dtype int16 supports reduction 'none' only"),
        (("float32", "none", 1), r"^unknown weight form 1; known: none, full, last_dim, rows, scalar \(or true"),
        (("float32", "none", "diagonal"), r"^unknown weight form 'diagonal'; known: none, full"),
        (("float32", "none", True, "row"), r"^unknown pos_weight form 'row'; known: none, full, last_dim$"),
        (("float32", "none", True, "none", "x"), r"^unknown wrt 'x'; known: logit, probability$"),
        (("int32", "none", True, "none", "probability"), r"^wrt='probability' needs a float dtype"),
        (("float16", "none", True, "full", "probability"), r"^pos_weight applies to wrt='logit' only"),
    ],
)
def test_a_variant_is_checked_when_it_is_made(fields: tuple, message: str) -> None:
    with pytest.raises(UnsupportedError, match=message):
        Variant(*fields)


def test_every_variant_is_every_computable_one_once() -> None:
    vs = every_variant()
    assert len(vs) == len(set(vs)) == 84  # floats: 3 x 3 x 2 x (3 + 1); ints: 2 x 1 x 2 x 3
    assert all(v.wrt == "logit" for v in vs if v.dtype.startswith("int"))
    assert all(v.pos_weight == "none" for v in vs if v.wrt == "probability")
    assert Variant("bfloat16", "mean", False, "none", "probability") in vs
    assert Variant("float16", "sum", True, "last_dim").label() == "float16/sum/w/logit/pw_last_dim"


def test_params_from_a_mapping() -> None:
    assert params_from_dict(None) == params_from_dict({}) == TilingParams()
    assert params_from_dict({"core_num": 3}) == TilingParams(core_num=3)
    with pytest.raises(TilingError, match=r"^unknown tiling parameter\(s\): a, tile; known: block_bytes, buffer_num"):
        params_from_dict({"tile": 1, "a": 2})


def test_a_generic_kernel_tiles_as_its_dtype_without_weight() -> None:
    k = elementwise_kernel("float16", 2, 1, ["add"])
    t = tile_kernel(k, [4, 1000], TilingParams(buffer_num=3))
    assert t.variant == Variant("float16", "none", weight=False)
    assert t.tiling_key == 3010 and t.shape == (4, 1000) and t.soc == "Ascend910B2" and t.scheme == "exact"


# ------------------------------------------------------------------ validate, rule by rule


def test_core_count_and_queue_limit() -> None:
    t = compute_tiling([1 << 20], Variant("float32"), TilingParams(core_num=49))
    assert ("core_count", 49) in kinds(t) and "49 cores requested, Ascend910B2 has 48" in validate(t)[0].message
    five = Variant("float32", "none", True, "full")  # grad, p, y, weight, pos_weight: five VECIN queues
    t = compute_tiling([1 << 16], five, TilingParams(buffer_num=2, tile_bytes=4096))
    (v,) = validate(t)
    assert (v.kind, v.count) == ("queue_limit", 10) and v.message.startswith("5 VECIN queues x buffer_num 2 = 10")
    assert kinds(compute_tiling([1 << 16], five, TilingParams(buffer_num=1))) == []


def test_ub_limit_is_inclusive() -> None:
    v = Variant("float32")
    k = compute_tiling([8], v).kernel
    usable = SOC.ub_usable_bytes
    fits = max(tb for tb in range(32, usable, 32) if k.ub_bytes(tb, 2) <= usable)
    assert kinds(compute_tiling([1 << 20], v, TilingParams(tile_bytes=fits))) == []
    over = compute_tiling([1 << 20], v, TilingParams(tile_bytes=fits + 32))
    assert kinds(over) == [("ub_overflow", k.ub_bytes(fits + 32, 2) - usable)]


def test_full_tiles_that_are_not_32_byte_multiples_drop_bytes() -> None:
    t = compute_tiling([1 << 16], Variant("float16"), TilingParams(tile_bytes=2050))  # several tiles per core
    full_tiles = sum(c.tiles - 1 for c in core_plan(t))  # each full tile's last element is never copied
    assert kinds(t) == [("misaligned_copy", 2050), ("coverage", full_tiles)] and full_tiles > 0
    assert (
        validate(t)[0].message
        == "full tiles are DataCopy of 2050 B, not a multiple of 32 B: the last 2 B of each are dropped"
    )
    assert validate(t)[1].message == f"{full_tiles} elements never written (DataCopy rounds down to 32 B)"
    one = compute_tiling([1000], Variant("float16"), TilingParams(tile_bytes=2050, core_num=1))  # one tile: a tail
    assert kinds(one) == []


def test_coverage_of_fabricated_tilings() -> None:
    t = compute_tiling([100_000], Variant("float32"), TilingParams(core_num=4, tile_bytes=8192))
    f = t.fields
    short = replace(
        t, fields=replace(f, lastCoreDataNum=f.lastCoreDataNum - 10, lastCoreTailDataNum=f.lastCoreTailDataNum - 10)
    )
    assert (
        kinds(short) == [("coverage", 10)] and "elements 99990..99999 assigned to no core" in validate(short)[0].message
    )
    wrong_tiles = replace(t, fields=replace(f, finalSmallTileNum=f.finalSmallTileNum + 1))
    (v,) = [v for v in validate(wrong_tiles) if v.kind == "coverage"][:1]
    assert v.count == f.tileDataNum and "tiles of 2048 with a tail of" in v.message


def test_out_of_bounds_counts_the_elements_past_the_end() -> None:
    t = compute_tiling([129], Variant("float32"), TilingParams(tile_bytes=4096), scheme="seed")
    assert ("out_of_bounds", 127) in kinds(t)
    assert ("scalar_out_of_bounds", 15) in kinds(compute_tiling([4096], Variant("float32", "sum"), scheme="seed"))


def test_bad_request_is_the_root_of_input_errors() -> None:
    assert issubclass(TilingError, BadRequest) and issubclass(UnsupportedError, BadRequest)
    assert issubclass(BadRequest, ValueError)


_FIELDS = [
    "bigCoreDataNum", "smallCoreDataNum", "tailBlockNum", "finalBigTileNum", "finalSmallTileNum", "tileDataNum",
    "bigTailDataNum", "smallTailDataNum", "lastCoreDataNum", "lastCoreTileNum", "lastCoreTailDataNum",
]  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(
    variants,
    sizes,
    st.sampled_from(SOCS),
    st.sampled_from([32, 64, 512, 2048]),
    st.sampled_from([512, 1024, 4096]),
    st.integers(1, 48),
    st.sampled_from(["exact", "seed"]),
    st.lists(st.tuples(st.sampled_from(_FIELDS), st.integers(-3, 3)), max_size=2),
)
def test_the_run_check_passes_only_what_the_core_by_core_walk_passes(
    v: Variant, n: int, soc: str, block: int, tile: int, cores: int, scheme: str, tamper: list[tuple[str, int]]
) -> None:
    """validate() walks three core runs instead of every core; where the runs say clean, the walk must find
    nothing (tilings as computed and with a field or two off by a few)."""
    from tiling_model.validate import _runs_are_clean, core_by_core

    try:
        params = TilingParams(block, 2, tile if scheme == "exact" else None, cores)
        t = compute_tiling([n], v if scheme == "exact" else Variant(v.dtype, v.reduction), params, soc, scheme,
                           period(v, n) or None)  # fmt: skip
    except BcetuneError:
        assume(False)
        raise
    f = t.fields
    for name, delta in tamper:
        f = replace(f, **{name: getattr(f, name) + delta})
    t = replace(t, fields=f)
    assume(t.n > 0)
    clean, walked = _runs_are_clean(t), core_by_core(t)
    event("runs clean" if clean else ("walk finds violations" if walked else "runs unsure, walk finds none"))
    if clean:
        assert walked == []
