"""Golden tests: the real kernel source, run in the CPU twin, against PyTorch autograd in float64.

wrt="logit" is the gradient of binary_cross_entropy_with_logits with respect to x = logit(p);
wrt="probability" the gradient of binary_cross_entropy with respect to p. Ints (which autograd
cannot differentiate) are checked exactly against the integer formula. Sizes cover the edges
(1, 7..9, 127..129, 2^k +- 1, 512-byte multiples +- 1 element, 1..48 cores) and random sizes up
to a few million; tilings are the default, random valid knob sets, and the seed scheme (which
must fault wherever it leaves the tensors).
"""

from __future__ import annotations

import ctypes
import zlib
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kernel import cpu
from kernel.reference import integer_reference, mismatches, reference, terms
from tiling_model import TilingParams, Variant, compute_tiling, load_soc
from tiling_model.dtypes import DTYPE_BYTES
from tiling_model.kernels import LAST_DIM_SUPER_ELEMS, bce_grad_kernel
from tiling_model.space import BLOCK_CHOICES
from tiling_model.validate import validate
from tiling_model.variant import WEIGHT_FORMS, broadcast_of, operand_shape

FLOATS = ("float32", "float16", "bfloat16")
INTS = ("int32", "int16")
CLASSES = (1, 3, 100, 4097)
GOLDEN_CASES = {"count": 0}


def edge_sizes(dtype: str) -> list[int]:
    per_block = 512 // DTYPE_BYTES[dtype]
    sizes = {1, 7, 8, 9, 127, 128, 129}
    sizes |= {2**k + d for k in range(4, 22) for d in (-1, 0, 1)}
    sizes |= {m * per_block + d for m in (1, 2, 3, 17, 47, 48, 49, 96, 1000) for d in (-1, 0, 1)}
    return sorted(s for s in sizes if s >= 1)


def torch_reference(g, p, y, w, pw, reduction: str, wrt: str) -> np.ndarray:
    """dL/dx by autograd in float64 (x = logit(p) for wrt=logit, x = p for wrt=probability)."""
    t = lambda a: None if a is None else torch.from_numpy(np.asarray(a).astype(np.float64))  # noqa: E731
    P, Y, G, W, PW = t(p), t(y), t(g), t(w), t(pw)
    if wrt == "logit":
        x = torch.logit(P).requires_grad_()
        loss = F.binary_cross_entropy_with_logits(x, Y, weight=W, pos_weight=PW, reduction=reduction)
    else:
        x = P.clone().requires_grad_()
        loss = F.binary_cross_entropy(x, Y, weight=W, reduction=reduction)
    loss.backward(G if reduction == "none" else G.reshape(()))
    return x.grad.numpy()


def make_inputs(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, reduction: str,
                weight: bool | str | tuple[int, ...], pos_weight: str) -> dict[str, np.ndarray | None]:  # fmt: skip
    """Random inputs; ``weight`` is a form (True / False: full / none; a form's smallest shape, see
    operand_shape) or the weight's own shape."""
    d = cpu.DTYPES[dtype]
    n = int(np.prod(shape))
    w_shape = weight if isinstance(weight, tuple) else operand_shape(Variant("float32", weight=weight).weight, shape)
    if dtype in INTS:
        small = lambda s: rng.integers(-6, 7, s).astype(d)  # noqa: E731  (no intermediate overflows int16)
        return {
            "grad": small(shape),
            "logits": small(shape),
            "labels": small(shape),
            "weight": None if w_shape is None else small(w_shape),
            "pos_weight": None if pos_weight == "none" else small(shape if pos_weight == "full" else shape[-1:]),
        }
    p = rng.uniform(0.02, 0.98, n).reshape(shape)
    y = np.where(rng.random(n) < 0.5, rng.integers(0, 2, n), rng.random(n)).reshape(shape)  # hard and soft labels
    g = rng.normal(size=shape if reduction == "none" else (1,)) * 2.0
    out = {
        "grad": g.astype(d),
        "logits": p.astype(d),
        "labels": y.astype(d),
        "weight": None if w_shape is None else rng.uniform(0.25, 4.0, w_shape).astype(d),
        "pos_weight": None,
    }
    if pos_weight != "none":
        out["pos_weight"] = rng.uniform(0.1, 5.0, shape if pos_weight == "full" else shape[-1:]).astype(d)
    return out


def check_case(
    shape: tuple[int, ...],
    dtype: str,
    reduction: str,
    weight: bool | str | tuple[int, ...],
    pos_weight: str,
    wrt: str,
    params: TilingParams | None,
    scheme: str,
    seed: int,
    flow: str = "launch",
) -> None:
    rng = np.random.default_rng(seed)
    a = make_inputs(rng, shape, dtype, reduction, weight, pos_weight)
    w = broadcast_of("weight", None if a["weight"] is None else a["weight"].shape, shape)
    tiling = compute_tiling(
        list(shape), Variant(dtype, reduction, w.form, pos_weight, wrt), params, "Ascend910B2", scheme, w.period
    )
    expected_faults = expected_faults_of(tiling)
    out = np.zeros(shape, dtype=cpu.DTYPES[dtype])
    GOLDEN_CASES["count"] += 1
    if expected_faults:
        with pytest.raises(cpu.KernelFault) as info:
            cpu.run_tiling(tiling, a, out, flow=flow)
        assert info.value.kind in expected_faults, str(info.value)
        return
    result = cpu.run_tiling(tiling, a, out, flow=flow)
    if out.size == 0:  # an empty tensor: no launch, no workspace, nothing read or written
        assert tiling.block_dim == 0 and tiling.workspace_bytes == 0 and result.ub_peak == 0
        assert not any(result.bytes_read.values()) and not any(result.bytes_written.values())
        return
    # the buffer plan the model budgets is the plan the kernel allocates, byte for byte
    plan = (
        tiling.kernel if scheme == "exact" else bce_grad_kernel(Variant(dtype, reduction, w.form))
    )  # seed tilings run ours
    assert result.ub_peak == result.ub_peak_min == plan.ub_bytes(tiling.params.tile_bytes, tiling.params.buffer_num)
    # every input element is read exactly once, absent inputs never, z written exactly once
    nbytes = out.nbytes
    assert result.bytes_read["logits"] == result.bytes_read["labels"] == nbytes
    assert result.bytes_read["grad"] == (nbytes if reduction == "none" else tiling.block_dim * out.itemsize)
    assert result.bytes_read["weight"] == weight_bytes_read(tiling, nbytes)
    assert result.bytes_read["pos_weight"] == pos_weight_bytes_read(tiling, pos_weight, nbytes)
    assert result.bytes_written["z"] == nbytes
    if dtype in INTS:
        ref = integer_reference(a["grad"], a["logits"], a["labels"], a["weight"], a["pos_weight"])
        assert np.array_equal(out, ref)
        return
    ref = torch_reference(a["grad"], a["logits"], a["labels"], a["weight"], a["pos_weight"], reduction, wrt)
    closed = reference(a["grad"], a["logits"], a["labels"], a["weight"], a["pos_weight"], reduction, wrt)
    size = terms(a["grad"], a["logits"], a["labels"], a["weight"], a["pos_weight"], reduction, wrt)
    assert np.all(np.abs(closed - ref) <= 1e-12 * (size + np.abs(ref)))  # the closed form is autograd's value
    bad = mismatches(out, ref, size, cancels=pos_weight != "none" or wrt == "probability")
    assert bad.size == 0, (
        f"{bad.size} of {out.size} elements off, first at {bad[0]}: got {out.reshape(-1)[bad[0]]!r}, "
        f"reference {ref.reshape(-1)[bad[0]]!r}"
    )


def pos_weight_bytes_read(tiling, pos_weight: str, nbytes: int) -> int:  # noqa: ANN001
    """Full: every element once. Last dim [C]: each core's prologue reads the row to build its periodic
    window (C elements once when C < 256, replicated in UB; else tile + C elements in chunks); the
    tiles then read the workspace, not pos_weight."""
    if pos_weight != "last_dim":
        return nbytes if pos_weight == "full" else 0
    c, elem = tiling.fields.posWeightClasses, tiling.elem_bytes
    per_core = c if c < LAST_DIM_SUPER_ELEMS else tiling.fields.tileDataNum + c
    return tiling.block_dim * per_core * elem


def weight_bytes_read(tiling, nbytes: int) -> int:  # noqa: ANN001
    """Full: every element once; none: nothing; scalar: one value per core; last_dim: each core's
    prologue reads its period P (once when P < 256, else tile + P elements in chunks), the tiles read
    the workspace; rows: each tile the values of the rows it touches."""
    form, f, elem = tiling.variant.weight, tiling.fields, tiling.elem_bytes
    if form in ("full", "none"):
        return nbytes if form == "full" else 0
    if form == "scalar":
        return tiling.block_dim * elem
    if form == "last_dim":
        per_core = f.weightPeriod if f.weightPeriod < LAST_DIM_SUPER_ELEMS else f.tileDataNum + f.weightPeriod
        return tiling.block_dim * per_core * elem
    r, values, start = f.weightPeriod, 0, 0
    for core in range(tiling.block_dim):
        count = f.bigCoreDataNum if core < f.tailBlockNum else f.smallCoreDataNum
        count = f.lastCoreDataNum if core == tiling.block_dim - 1 else count
        for lo in range(start, start + count, f.tileDataNum):
            hi = min(lo + f.tileDataNum, start + count)
            values += (hi - 1) // r - lo // r + 1
        start += count
    return values * elem


def expected_faults_of(tiling) -> set[str]:  # noqa: ANN001
    """The seed scheme's tilings run bcetune's kernel: which faults may the twin report first?"""
    if tiling.scheme == "exact":
        return set()
    soc = load_soc(tiling.soc)
    plan = bce_grad_kernel(tiling.variant)
    bn = tiling.params.buffer_num
    faults = set()
    if plan.ub_bytes(tiling.params.tile_bytes, bn) > soc.ub_usable_bytes:
        faults.add("ub_overflow")
    if bn not in plan.allowed_buffer_nums():
        faults.add("queue_limit")
    if any(v.kind == "out_of_bounds" for v in validate(tiling)):
        faults.add("gm_out_of_bounds")
    return faults


def shape_for(n: int, pos_weight: str, classes: int) -> tuple[int, ...]:
    if pos_weight == "last_dim":
        return (max(1, n // classes), classes)
    return (n,)


# ------------------------------------------------------------------ deterministic edges


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_edge_sizes_default_tiling(dtype: str) -> None:
    for i, n in enumerate(edge_sizes(dtype)):
        reduction = "none" if dtype in INTS else ("none", "sum", "mean")[i % 3]
        check_case((n,), dtype, reduction, i % 2 == 0, "none", "logit", None, "exact", i)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("classes", CLASSES)
def test_last_dim_pos_weight_every_class_count(dtype: str, classes: int) -> None:
    for i, rows in enumerate((1, 2, 7, 33, 129)):
        reduction = "none" if dtype in INTS else ("none", "sum", "mean")[i % 3]
        params = None if i % 2 else TilingParams(tile_bytes=1024, block_bytes=64 * DTYPE_BYTES[dtype])
        check_case((rows, classes), dtype, reduction, i % 2 == 1, "last_dim", "logit", params, "exact", i)


#: Input shape and weight shape: per-class [C] (C = 1, C not dividing a core's range, C past the UB
#: replication width), [1, C], [B, C] (a period over two dims), per-row [N, 1] (rows shorter than a
#: 32-B block, longer than a tile), [A, B, 1], scalar [1] and [], the full shape.
WEIGHT_SHAPES: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((37, 129), (129,)), ((200, 1), (1,)), ((64, 3), (3,)), ((3, 4097), (4097,)), ((50, 7), (1, 7)),
    ((5, 3, 7), (3, 7)), ((37, 129), (37, 1)), ((3000, 2), (3000, 1)), ((11, 5), (11, 1)),
    ((2, 9000), (2, 1)), ((4, 3, 5), (4, 3, 1)), ((4, 3, 5), (4, 1, 1)), ((1000,), (1,)), ((33, 9), ()),
    ((33, 9), (33, 9)), ((1, 1), (1,)), ((0, 5), (5,)), ((4, 0), (4, 1)),
)  # fmt: skip


@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize(("shape", "w_shape"), WEIGHT_SHAPES)
def test_every_weight_form_against_autograd(dtype: str, shape: tuple[int, ...], w_shape: tuple[int, ...]) -> None:
    """Every broadcast form of weight (and with a [C] pos_weight beside it), every reduction, the default
    tiling and small tiles on many cores: autograd's gradient (ints: the exact formula), each weight
    value read as the form promises (check_case: bytes_read), the UB plan the model's."""
    w = broadcast_of("weight", w_shape, shape).form
    reductions = ("none",) if dtype in INTS else ("none", "sum", "mean")
    for i, reduction in enumerate(reductions):
        for j, pw in enumerate(("none", "last_dim")):
            bn = 1 if pw == "last_dim" and w in ("full", "last_dim", "rows") and reduction == "none" else 2
            for k, params in enumerate((None, TilingParams(block_bytes=32, buffer_num=bn, tile_bytes=96, core_num=7))):
                seed = 100 * i + 10 * j + k
                check_case(shape, dtype, reduction, w_shape, pw, "logit", params, "exact", seed)
    if dtype in FLOATS:
        check_case(shape, dtype, "mean", w_shape, "none", "probability", None, "exact", 7)


@pytest.mark.parametrize("dtype", FLOATS + INTS)
def test_custom_op_flow_computes_every_variant(dtype: str) -> None:
    """The custom-op build of the same source (generated tiling macro, DTYPE_LOGITS fixed, the
    framework's workspace first) gives the same answers as the launch build."""
    variants = [("none", "logit"), ("full", "logit"), ("last_dim", "logit")]
    variants += [("none", "probability")] if dtype in FLOATS else []
    reductions = ("none", "sum", "mean") if dtype in FLOATS else ("none",)
    for i, (pw, wrt) in enumerate(variants):
        for j, reduction in enumerate(reductions):
            for k, n in enumerate((1, 129, 48 * 512 // DTYPE_BYTES[dtype] + 1, 100_003)):
                params = TilingParams(tile_bytes=2048) if k == 3 else None
                seed = 100 * i + 10 * j + k
                check_case(shape_for(n, pw, 7), dtype, reduction, k % 2 == 0, pw, wrt, params, "exact", seed, "op")


@pytest.mark.kernel_sweep
@pytest.mark.parametrize("dtype", FLOATS)
def test_every_variant_on_cores_1_to_48(dtype: str) -> None:
    per_block = 512 // DTYPE_BYTES[dtype]
    variants = [("none", "logit"), ("full", "logit"), ("last_dim", "logit"), ("none", "probability")]
    for cores in range(1, 49):
        pw, wrt = variants[cores % 4]
        reduction = ("none", "sum", "mean")[cores % 3]
        n = cores * per_block - (cores % 2)
        check_case(shape_for(n, pw, 3), dtype, reduction, cores % 5 != 0, pw, wrt, None, "exact", cores)


def test_seed_scheme_faults_out_of_bounds_where_the_seed_leaves_the_tensors() -> None:
    rng = np.random.default_rng(0)
    a = make_inputs(rng, (100,), "float32", "none", True, "none")
    # the seed's own default tile already overflows the usable UB (5 queues x 2 x 19456 B > 188160 B)
    with pytest.raises(cpu.KernelFault, match="ub_overflow"):
        cpu.bce_grad(a["grad"], a["logits"], a["labels"], a["weight"], scheme="seed")
    # with a tile that fits, the seed's 512-byte rounding reads past the 100 elements
    with pytest.raises(cpu.KernelFault, match=r"gm_out_of_bounds.*elements \[\d+, 128\) but the tensor has 100"):
        cpu.bce_grad(a["grad"], a["logits"], a["labels"], a["weight"], scheme="seed",
                     params=TilingParams(tile_bytes=4096))  # fmt: skip
    z = cpu.bce_grad(a["grad"], a["logits"], a["labels"], a["weight"])  # the exact scheme stays in bounds
    ref = reference(a["grad"], a["logits"], a["labels"], a["weight"])
    assert mismatches(z, ref, terms(a["grad"], a["logits"], a["labels"], a["weight"]), False).size == 0


def test_mean_scale_does_not_underflow_for_float16(tmp_path) -> None:  # noqa: ANN001
    """The seed turns grad/N into a half scalar (0 for large N): its Compute step, run in the twin, gives
    z = 0; the host's float 1/N in bcetune's kernel gives the right subnormal value."""
    n = 2**25
    p = np.full(n, 0.75, dtype=np.float16)
    y = np.zeros(n, dtype=np.float16)
    w = np.full(n, 1000.0, dtype=np.float16)
    g = np.ones(1, dtype=np.float16)
    z = cpu.bce_grad(g, p, y, w, reduction="mean", cores=[0, 47])  # two cores are enough to see it
    expected = np.float16(1000.0 * 0.75 / n)  # 2.24e-05, a float16 subnormal
    assert expected != 0 and np.all(z[:100] == expected) and np.all(z[-100:] == expected)

    lib_path = tmp_path / "seed_mean_half.so"
    cpu.compile_twin(Path(__file__).parent / "cpp" / "seed_mean_half.cpp", lib_path)
    lib = ctypes.CDLL(str(lib_path))
    u16p = ctypes.POINTER(ctypes.c_uint16)
    lib.seed_mean_half.argtypes = [u16p, u16p, u16p, ctypes.c_uint16, ctypes.c_double, u16p, ctypes.c_char_p,
                                   ctypes.c_ulong]  # fmt: skip
    tile = [np.ascontiguousarray(a[:256]) for a in (p, y, w)]
    seed_z = np.full(256, 1.0, dtype=np.float16)
    err = ctypes.create_string_buffer(512)
    ptr = lambda a: a.ctypes.data_as(u16p)  # noqa: E731
    rc = lib.seed_mean_half(*(ptr(a) for a in tile), int(g.view(np.uint16)[0]), float(n), ptr(seed_z), err, 512)
    assert rc == 0, err.value
    assert np.all(seed_z == 0)  # the seed's result for the same elements: the gradient vanishes


# ------------------------------------------------------------------ random cases (hypothesis)


@st.composite
def cases(draw: st.DrawFn, dtypes: tuple[str, ...]) -> dict:
    dtype = draw(st.sampled_from(dtypes))
    is_int = dtype in INTS
    reduction = "none" if is_int else draw(st.sampled_from(("none", "sum", "mean")))
    scheme = draw(st.sampled_from(("exact", "exact", "exact", "seed")))
    if scheme == "seed":
        weight, pos_weight, wrt = True, "none", "logit"
    else:
        weight = draw(st.sampled_from(WEIGHT_FORMS))
        wrt = "logit" if is_int else draw(st.sampled_from(("logit", "logit", "probability")))
        pos_weight = "none" if wrt == "probability" else draw(st.sampled_from(("none", "full", "last_dim")))
    n = draw(
        st.one_of(
            st.sampled_from(edge_sizes(dtype)),
            st.sampled_from(edge_sizes(dtype)),
            st.integers(1, 5000),
            st.integers(1, 5000),
            st.integers(1, 200_000),
            st.integers(1, 3_000_000),
        )
    )
    classes = draw(st.sampled_from(CLASSES))
    knobs = draw(st.booleans())
    params = None
    if knobs:
        params = TilingParams(
            block_bytes=draw(st.sampled_from(BLOCK_CHOICES)) if scheme == "exact" else None,
            buffer_num=draw(st.integers(1, 4)),
            tile_bytes=draw(st.integers(1, 256)) * (512 if scheme == "seed" else 32),
            core_num=draw(st.integers(1, 48)),
        )
    shape = shape_for(n, pos_weight, classes)
    if weight in ("last_dim", "rows") and pos_weight != "last_dim":  # a period of its own: [n / C, C]
        shape = (max(1, n // classes), classes)
    return {
        "shape": shape,
        "dtype": dtype,
        "reduction": reduction,
        "weight": weight,
        "pos_weight": pos_weight,
        "wrt": wrt,
        "params": params,
        "scheme": scheme,
        "seed": draw(st.integers(0, 2**31)),
    }


def run_random(case: dict) -> None:
    # the tiling check_case runs: the weight's form as its operand broadcasts (a "scalar" weight of a
    # one-element input is that input's full shape: three queues where the drawn form said two)
    shape = tuple(case["shape"])
    w = broadcast_of("weight", operand_shape(Variant("float32", weight=case["weight"]).weight, shape), shape)
    variant = Variant(case["dtype"], case["reduction"], w.form, case["pos_weight"], case["wrt"])
    t = compute_tiling(list(shape), variant, case["params"], "Ascend910B2", case["scheme"], w.period)
    if case["scheme"] == "exact" and case["params"] and case["params"].buffer_num:
        assume(case["params"].buffer_num in t.kernel.allowed_buffer_nums())
    if case["scheme"] == "exact":
        assume(validate(t) == [])  # invalid knob sets are the tiling model's to reject, not the kernel's
    check_case(**case)


@pytest.mark.kernel_sweep
@settings(max_examples=400)
@given(cases(("float32",)))
def test_random_float32(case: dict) -> None:
    run_random(case)


@pytest.mark.kernel_sweep
@settings(max_examples=400)
@given(cases(("float16",)))
def test_random_float16(case: dict) -> None:
    run_random(case)


@pytest.mark.kernel_sweep
@settings(max_examples=400)
@given(cases(("bfloat16",)))
def test_random_bfloat16(case: dict) -> None:
    run_random(case)


@pytest.mark.kernel_sweep
@settings(max_examples=400)
@given(cases(INTS))
def test_random_ints(case: dict) -> None:
    run_random(case)


def test_bfloat16_arrays_travel_through_ml_dtypes() -> None:
    p = np.array([0.25, 0.5, 0.75], dtype=ml_dtypes.bfloat16)
    y = np.array([0, 1, 1], dtype=ml_dtypes.bfloat16)
    g = np.ones(3, dtype=ml_dtypes.bfloat16)
    z = cpu.bce_grad(g, p, y)
    assert z.dtype == ml_dtypes.bfloat16 and z.astype(np.float32).tolist() == [0.25, -0.5, -0.25]


# ---------------------------------------------------------------- the fused mode (bce_with_logits_fused.cpp)

#: Per dtype: what one output rounding and float32 compute allow, relative to the size of the terms.
FUSED_RTOL = {"float32": 1e-5, "float16": 1e-3, "bfloat16": 8e-3}
#: Logits at the edges: exp(-x) overflows below -88.7, softplus(-x) underflows past 17 (log1p's correction).
EXTREME_LOGITS = (-100.0, -89.0, -88.0, -30.0, -17.0, -1e-3, 0.0, 1e-3, 17.0, 30.0, 88.0, 100.0)


def fused_inputs(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, weight: str,
                 pos_weight: str) -> dict[str, np.ndarray | None]:  # fmt: skip
    """Logits spread wide with the edges first, hard and soft targets, weights of the form's smallest shape."""
    d, n = cpu.DTYPES[dtype], int(np.prod(shape))
    x = rng.normal(0.0, 6.0, n)
    x[: len(EXTREME_LOGITS)] = EXTREME_LOGITS[:n]
    y = np.where(rng.random(n) < 0.5, rng.integers(0, 2, n), rng.random(n))
    w_shape = operand_shape(weight, shape, shape[-1] if weight in ("last_dim", "rows") else 0)  # type: ignore[arg-type]
    if weight == "rows":
        w_shape = (*shape[:-1], 1)
    return {
        "logits": x.reshape(shape).astype(d),
        "labels": y.reshape(shape).astype(d),
        "weight": None if w_shape is None else rng.uniform(0.25, 4.0, w_shape).astype(d),
        "pos_weight": None
        if pos_weight == "none"
        else rng.uniform(0.1, 5.0, shape if pos_weight == "full" else shape[-1:]).astype(d),
    }


def fused_reference(a: dict[str, np.ndarray | None], reduction: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(loss, dx, size of the loss's terms) by autograd in float64 from the inputs as the dtype holds them."""
    t = lambda v: None if v is None else torch.from_numpy(np.asarray(v).astype(np.float64))  # noqa: E731
    x = t(a["logits"]).requires_grad_()
    loss = F.binary_cross_entropy_with_logits(x, t(a["labels"]), weight=t(a["weight"]), pos_weight=t(a["pos_weight"]),
                                              reduction=reduction)  # fmt: skip
    loss.sum().backward()
    xs, ys = x.detach().numpy(), a["labels"].astype(np.float64)
    w = 1.0 if a["weight"] is None else a["weight"].astype(np.float64)
    pw = 1.0 if a["pos_weight"] is None else a["pos_weight"].astype(np.float64)
    softplus = np.logaddexp(0.0, -xs)
    size = np.broadcast_to(w, xs.shape) * (np.abs(1 - ys) * np.abs(xs) + np.abs(1 + (pw - 1) * ys) * softplus)
    return loss.detach().numpy(), x.grad.numpy(), size


@pytest.mark.parametrize("pos_weight", ["none", "full", "last_dim"])
@pytest.mark.parametrize("weight", ["none", "full", "last_dim", "rows", "scalar"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_the_fused_mode_is_pytorchs_float64_loss_and_gradient(dtype: str, reduction: str, weight: str,
                                                             pos_weight: str) -> None:  # fmt: skip
    """Every float dtype, weight form, pos_weight form and reduction, over many cores and tiles with tails:
    the loss and dx within the dtype's rounding of autograd's float64 (relative to the terms' size), the plan
    the model budgets is what the kernel allocates, every input read once and every output written once."""
    shape = (61, 67)
    rng = np.random.default_rng(zlib.crc32(f"{dtype}/{reduction}/{weight}/{pos_weight}".encode()))
    a = fused_inputs(rng, shape, dtype, weight, pos_weight)
    w = broadcast_of("weight", None if a["weight"] is None else a["weight"].shape, shape)
    variant = Variant(dtype, reduction, w.form, pos_weight, "logit", "fused")
    params = TilingParams(block_bytes=256, tile_bytes=512, core_num=6)
    tiling = compute_tiling(list(shape), variant, params, "Ascend910B2", "exact", w.period)
    assert tiling.block_dim > 1 and tiling.fields.tileDataNum * 2 < tiling.fields.bigCoreDataNum  # cores, tiles
    none = reduction == "none"
    dx = np.zeros(shape, cpu.DTYPES[dtype])
    loss = np.zeros(shape if none else (tiling.block_dim,), cpu.DTYPES[dtype] if none else np.float32)
    result = cpu.run_fused_tiling(tiling, a, dx, loss)
    assert result.ub_peak == result.ub_peak_min == tiling.kernel.ub_bytes(512, tiling.params.buffer_num)
    nbytes = dx.nbytes
    assert result.bytes_read["logits"] == result.bytes_read["labels"] == nbytes
    assert result.bytes_read["weight"] == weight_bytes_read(tiling, nbytes)
    assert result.bytes_read["pos_weight"] == pos_weight_bytes_read(tiling, pos_weight, nbytes)
    assert result.bytes_written["dx"] == nbytes
    assert result.bytes_written["loss"] == (nbytes if none else tiling.block_dim * 4)
    assert not result.bytes_read["dx"] and not result.bytes_read["loss"]
    ref_loss, ref_dx, size = fused_reference(a, reduction)
    rtol = FUSED_RTOL[dtype]
    floor = float(np.finfo(cpu.DTYPES[dtype]).smallest_normal)  # below it the dtype's spacing is absolute
    scale = 1 / dx.size if reduction == "mean" else 1.0
    w_full = np.broadcast_to(1.0 if a["weight"] is None else a["weight"].astype(np.float64), shape)
    pw_full = np.broadcast_to(1.0 if a["pos_weight"] is None else a["pos_weight"].astype(np.float64), shape)
    dx_size = w_full * (1 + pw_full) * scale  # |coef * s| + |pw * y| bound
    bad = np.flatnonzero(np.abs(dx.astype(np.float64) - ref_dx) > rtol * dx_size + floor)
    assert bad.size == 0, (
        f"dx: {bad.size} off, first {bad[0]}: {dx.reshape(-1)[bad[0]]!r} vs {ref_dx.reshape(-1)[bad[0]]!r}"
    )
    if none:
        bad = np.flatnonzero(np.abs(loss.astype(np.float64) - ref_loss) > rtol * size + floor)
        assert bad.size == 0, (
            f"loss: {bad.size} off, first {bad[0]}: {loss.reshape(-1)[bad[0]]!r} vs {ref_loss.reshape(-1)[bad[0]]!r}"
        )
    else:
        got = float(np.sum(loss.astype(np.float64))) * (scale if reduction == "mean" else 1.0)
        assert abs(got - float(ref_loss)) <= rtol * float(size.sum()) * scale, (got, float(ref_loss))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_the_fused_float32_loss_with_class_weights_is_within_1e_5_of_pytorchs_float64(reduction: str) -> None:
    """Issue 39's check: weight [C] and pos_weight [C], float32: the loss and dx within 1e-5 relative of
    PyTorch's float64 (as a whole: the largest error against the largest value), at the default tiling."""
    shape = (96, 1031)
    a = fused_inputs(np.random.default_rng(39), shape, "float32", "last_dim", "last_dim")
    loss, dx = cpu.bce_with_logits_fused(a["logits"], a["labels"], a["weight"], a["pos_weight"], reduction=reduction)
    ref_loss, ref_dx, _ = fused_reference(a, reduction)
    assert np.max(np.abs(dx - ref_dx)) <= 1e-5 * np.max(np.abs(ref_dx))
    assert np.max(np.abs(loss - ref_loss)) <= 1e-5 * np.max(np.abs(ref_loss))


def test_the_fused_sum_is_the_same_run_to_run_and_close_across_core_counts() -> None:
    """Each core sums its tiles in order and the host adds the cores' sums in order: a run repeats bit for bit;
    another split of the work rounds differently, within float32's rounding of the sum."""
    shape = (257, 1031)
    a = fused_inputs(np.random.default_rng(7), shape, "float32", "full", "last_dim")
    args = (a["logits"], a["labels"], a["weight"], a["pos_weight"])
    first = [cpu.bce_with_logits_fused(*args, reduction="sum")[0] for _ in range(3)]
    assert all(f.tobytes() == first[0].tobytes() for f in first)
    other = cpu.bce_with_logits_fused(*args, reduction="sum", params=TilingParams(core_num=7, tile_bytes=4096))[0]
    assert abs(float(other) - float(first[0])) <= 1e-5 * abs(float(first[0]))


def test_the_fused_mode_refuses_what_it_does_not_compute() -> None:
    from tiling_model.dtypes import UnsupportedError

    for bad in (dict(dtype="int32"), dict(dtype="float32", wrt="probability")):
        with pytest.raises(UnsupportedError, match="mode='fused'"):
            Variant(bad.pop("dtype"), "none", "full", "none", mode="fused", **bad)  # type: ignore[arg-type]
    x = np.zeros((4, 8), np.float32)
    tiling = compute_tiling([4, 8], Variant("float32", "none"), None, "Ascend910B2")
    with pytest.raises(ValueError, match="run_fused_tiling"):
        cpu.run_tiling(compute_tiling([4, 8], Variant("float32", "none", mode="fused")), {}, x)
    with pytest.raises(ValueError, match="fused-mode tiling"):
        cpu.run_fused_tiling(tiling, {}, x, x)
