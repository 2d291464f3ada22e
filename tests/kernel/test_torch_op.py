"""torch.ops.bcetune.bce_grad and the bcetune BCE losses on the CPU with the kernel source in the twin
(``$BCETUNE_CPU_LOSS=twin``, set for every test here: the NPU's path; the default fused CPU path is
test_fused_loss.py's).

The operator passes torch.library.opcheck (schema, autograd registration, fake tensors, AOT dispatch
with dynamic shapes) for every dtype, reduction, weight form, pos_weight form and wrt; its values are
the kernel's (within the kernel's documented tolerance, kernel/reference.py) against PyTorch's own
float64 autograd; the losses' gradients are checked by gradcheck's finite differences and against
PyTorch's float64 backward; a small model trains with them as with PyTorch's losses, eagerly and under
torch.compile (whose backward graph holds the operator). The NPU implementation is compiled in
test_npu_ext.py and not run here (no NPU).
"""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import graph_capturing_backend
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel import torch_op
from kernel.reference import mismatches, terms
from tiling_model.variant import operand_shape

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the CPU twin needs g++")


@pytest.fixture(autouse=True)
def _losses_run_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BCETUNE_CPU_LOSS", "twin")


TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "int32": torch.int32, "int16": torch.int16}  # fmt: skip
FLOATS = ("float32", "float16", "bfloat16")
WEIGHT_FORMS = ("none", "full", "last_dim", "rows", "scalar")
SHAPE = (6, 37)


def operands(
    shape: tuple[int, ...], dtype: str, reduction: str, weight: str, pos_weight: str, wrt: str, seed: int = 0
) -> tuple[torch.Tensor, ...]:
    """(grad, p, y, weight, pos_weight) of one call: p a probability, y hard and soft labels."""
    gen = torch.Generator().manual_seed(seed)
    dt = TORCH_DTYPES[dtype]
    w_shape = operand_shape(weight, shape)  # type: ignore[arg-type]
    pw_shape = None if pos_weight == "none" else (shape if pos_weight == "full" else shape[-1:])
    g_shape = shape if reduction == "none" else ()
    if dtype.startswith("int"):
        small = lambda s: torch.randint(-6, 7, s, generator=gen).to(dt)  # noqa: E731
        return (
            small(g_shape),
            small(shape),
            small(shape),
            *(None if s is None else small(s) for s in (w_shape, pw_shape)),
        )
    p = torch.rand(shape, generator=gen, dtype=torch.float64) * 0.96 + 0.02
    y = torch.where(torch.rand(shape, generator=gen) < 0.5, (torch.rand(shape, generator=gen) < 0.5).double(),
                    torch.rand(shape, generator=gen, dtype=torch.float64))  # fmt: skip
    g = torch.randn(g_shape, generator=gen, dtype=torch.float64) * 2
    w = None if w_shape is None else torch.rand(w_shape, generator=gen, dtype=torch.float64) + 0.5
    pw = None if pw_shape is None else torch.rand(pw_shape, generator=gen, dtype=torch.float64) * 3 + 0.25
    return tuple(None if t is None else t.to(dt) for t in (g, p, y, w, pw))


def cases() -> list[tuple[str, str, str, str, str]]:
    """Every dtype x reduction x wrt (the weight form cycling), and every weight x pos_weight form."""
    out = []
    i = 0
    for dtype in TORCH_DTYPES:
        for reduction in ("none", "sum", "mean") if dtype in FLOATS else ("none",):
            for wrt in ("logit", "probability") if dtype in FLOATS else ("logit",):
                pw = ("none", "full", "last_dim")[i % 3] if wrt == "logit" else "none"
                out.append((dtype, reduction, WEIGHT_FORMS[i % len(WEIGHT_FORMS)], pw, wrt))
                i += 1
    for weight in WEIGHT_FORMS:
        for pw in ("none", "full", "last_dim"):
            out.append(("float32", "mean", weight, pw, "logit"))
    return out


@pytest.mark.parametrize(("dtype", "reduction", "weight", "pos_weight", "wrt"), cases())
def test_opcheck_passes_for_every_dtype_reduction_form_and_wrt(
    dtype: str, reduction: str, weight: str, pos_weight: str, wrt: str
) -> None:
    args = operands(SHAPE, dtype, reduction, weight, pos_weight, wrt)
    torch.library.opcheck(torch.ops.bcetune.bce_grad.default, (*args, reduction, wrt))


def test_opcheck_passes_on_empty_tensors() -> None:
    z = torch.empty(0, 5)
    torch.library.opcheck(torch.ops.bcetune.bce_grad.default, (z, z, z, None, torch.ones(5), "none", "logit"))
    out = torch.ops.bcetune.bce_grad(torch.ones(()), z, z, None, None, "mean", "probability")
    assert out.shape == (0, 5)


def torch_grad64(g, p, y, w, pw, reduction: str, wrt: str) -> torch.Tensor:
    """dL/dx by PyTorch's own autograd in float64 (x = logit(p) for wrt=logit)."""
    d = lambda t: None if t is None else t.double()  # noqa: E731
    P, Y, G, W, PW = d(p), d(y), d(g), d(w), d(pw)
    x = (torch.logit(P) if wrt == "logit" else P.clone()).requires_grad_()
    if wrt == "logit":
        loss = F.binary_cross_entropy_with_logits(x, Y, W, reduction=reduction, pos_weight=PW)
    else:
        loss = F.binary_cross_entropy(x, Y, W, reduction=reduction)
    loss.backward(G)
    return x.grad


def as_numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def assert_within_kernel_tolerance(z: torch.Tensor, ref: torch.Tensor, args: tuple, reduction: str, wrt: str) -> None:
    np_ = lambda t: None if t is None else t.double().numpy()  # noqa: E731
    size = terms(*(np_(a) for a in args), reduction, wrt)
    zn = as_numpy(z)
    bad = mismatches(zn, ref.numpy(), size, cancels=args[4] is not None or wrt == "probability")
    assert bad.size == 0, (
        f"{bad.size} elements off, first {bad[:5]}: {zn.reshape(-1)[bad[:5]]} vs {ref.reshape(-1)[bad[:5]]}"
    )


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 40), min_size=1, max_size=3).map(tuple),
    dtype=st.sampled_from(FLOATS),
    reduction=st.sampled_from(("none", "sum", "mean")),
    weight=st.sampled_from(WEIGHT_FORMS),
    pos_weight=st.sampled_from(("none", "full", "last_dim")),
    wrt=st.sampled_from(("logit", "probability")),
    seed=st.integers(0, 2**31),
)
def test_op_is_pytorchs_float64_gradient_within_the_kernels_tolerance(
    shape: tuple[int, ...], dtype: str, reduction: str, weight: str, pos_weight: str, wrt: str, seed: int
) -> None:
    pos_weight = pos_weight if wrt == "logit" else "none"
    args = operands(shape, dtype, reduction, weight, pos_weight, wrt, seed)
    z = torch.ops.bcetune.bce_grad(*args, reduction, wrt)
    assert z.shape == shape and z.dtype == args[1].dtype
    assert_within_kernel_tolerance(z, torch_grad64(*args, reduction, wrt), args, reduction, wrt)


def test_int_op_is_the_integer_formula_exactly() -> None:
    g, p, y, w, pw = operands(SHAPE, "int32", "none", "full", "last_dim", "logit")
    z = torch.ops.bcetune.bce_grad(g, p, y, w, pw, "none", "logit")
    expected = g * w * ((pw * y + 1 - y) * p - pw * y)
    assert torch.equal(z, expected)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("bad", "logit"), "reduction='bad'"),
        (("none", "prob"), "wrt='prob'"),
        (("sum", "logit"), "one scalar grad"),
    ],
)
def test_op_refuses_bad_arguments_naming_them(args: tuple[str, str], message: str) -> None:
    g, p, y, _, _ = operands(SHAPE, "float32", "none", "none", "none", "logit")
    with pytest.raises(ValueError, match=message):
        torch.ops.bcetune.bce_grad(g, p, y, None, None, *args)


def test_op_refuses_mismatched_operands() -> None:
    g, p, y, _, _ = operands(SHAPE, "float32", "none", "none", "none", "logit")
    with pytest.raises(ValueError, match="y has shape"):
        torch.ops.bcetune.bce_grad(g, p, y[:2], None, None, "none", "logit")
    with pytest.raises(ValueError, match="weight is float16 but p is float32"):
        torch.ops.bcetune.bce_grad(g, p, y, torch.ones(37, dtype=torch.float16), None, "none", "logit")
    with pytest.raises(ValueError, match="pos_weight applies to wrt='logit' only"):
        torch.ops.bcetune.bce_grad(g, p, y, None, torch.ones(37), "none", "probability")
    with pytest.raises(ValueError, match="p is float64"):
        torch.ops.bcetune.bce_grad(g.double(), p.double(), y.double(), None, None, "none", "logit")


# --- the losses -------------------------------------------------------------------------------------


def loss_pair(kind: str):  # noqa: ANN201
    return (
        (torch_op.binary_cross_entropy_with_logits, F.binary_cross_entropy_with_logits)
        if kind == "logits"
        else (torch_op.binary_cross_entropy, F.binary_cross_entropy)
    )


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(
    ("weight_shape", "pos_weight_shape"),
    [(None, None), ((6, 37), None), ((37,), (37,)), ((6, 1), (37,)), ((1,), (6, 37)), ((), (1, 37))],
)
def test_gradcheck_of_the_logits_loss_on_the_kernel(
    reduction: str, weight_shape: tuple[int, ...] | None, pos_weight_shape: tuple[int, ...] | None
) -> None:
    """Finite differences of the float32 loss against the kernel's float32 gradient (gradcheck in
    float64 on a float32 function: eps and tolerances sized for float32)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(SHAPE, generator=gen, dtype=torch.float64).requires_grad_()
    y = (torch.rand(SHAPE, generator=gen) < 0.5).float()
    w = None if weight_shape is None else torch.rand(weight_shape, generator=gen) + 0.5
    pw = None if pos_weight_shape is None else torch.rand(pos_weight_shape, generator=gen) * 2 + 0.5

    def f(x64: torch.Tensor) -> torch.Tensor:
        loss = torch_op.binary_cross_entropy_with_logits(x64.float(), y, w, reduction=reduction, pos_weight=pw)
        return loss.double()

    with warnings.catch_warnings():
        warnings.simplefilter("error", torch_op.FallbackWarning)  # the kernel ran, no fallback
        assert torch.autograd.gradcheck(f, (x,), eps=1e-2, atol=2e-3, rtol=2e-2, nondet_tol=0.0)


@pytest.mark.parametrize("kind", ["logits", "probability"])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_loss_gradient_is_pytorchs_float64_backward_within_the_kernels_error(
    kind: str, dtype: str, reduction: str
) -> None:
    """The bcetune loss's input gradient against PyTorch's own autograd in float64 on the same
    inputs, broadcast weights and a [C] pos_weight included."""
    dt = TORCH_DTYPES[dtype]
    gen = torch.Generator().manual_seed(11)
    for w_shape, pw_shape in (((6, 37), None), ((37,), (37,)), ((6, 1), (37,)), ((1,), (6, 37)), (None, None)):
        if kind == "probability" and pw_shape is not None:
            continue
        x64 = torch.randn(SHAPE, generator=gen, dtype=torch.float64)
        if kind == "probability":
            x64 = torch.sigmoid(x64)
        y64 = torch.where(torch.rand(SHAPE, generator=gen) < 0.5, (torch.rand(SHAPE, generator=gen) < 0.5).double(),
                          torch.rand(SHAPE, generator=gen, dtype=torch.float64))  # fmt: skip
        w64 = None if w_shape is None else torch.rand(w_shape, generator=gen, dtype=torch.float64) + 0.5
        pw64 = None if pw_shape is None else torch.rand(pw_shape, generator=gen, dtype=torch.float64) * 3 + 0.25
        ours, theirs = loss_pair(kind)
        cast = lambda t: None if t is None else t.to(dt)  # noqa: E731
        x = cast(x64).requires_grad_()
        kw = {"pos_weight": cast(pw64)} if kind == "logits" else {}
        with warnings.catch_warnings():
            warnings.simplefilter("error", torch_op.FallbackWarning)
            loss = ours(x, cast(y64), cast(w64), reduction=reduction, **kw)
        upstream = torch.randn(loss.shape, generator=gen, dtype=torch.float64)
        loss.backward(upstream.to(dt))
        # PyTorch in float64 on exactly the values the kernel saw (inputs rounded to the dtype)
        d = lambda t: None if t is None else t.to(dt).double()  # noqa: E731
        x_ref = d(x64).requires_grad_()
        kw64 = {"pos_weight": d(pw64)} if kind == "logits" else {}
        theirs(x_ref, d(y64), d(w64), reduction=reduction, **kw64).backward(d(upstream))
        # the kernel's tolerance on its inputs, plus the saved sigmoid's rounding to the dtype (wrt logit)
        p = torch.sigmoid(x_ref.detach()) if kind == "logits" else x_ref.detach()
        size = terms(upstream.to(dt).double().numpy(), p.numpy(), d(y64).numpy(),
                     None if w64 is None else d(w64).numpy(), None if pw64 is None else d(pw64).numpy(),
                     reduction, "logit" if kind == "logits" else "probability")  # fmt: skip
        # the kernel's tolerance on its inputs (kernel/reference.py), the slack widened by the saved
        # sigmoid's rounding to the dtype (wrt logit: the reference takes the exact sigmoid)
        eps = float(torch.finfo(dt).eps) if kind == "logits" else 0.0
        bad = mismatches(as_numpy(x.grad), x_ref.grad.numpy(), size, cancels=True, input_eps=eps)
        assert bad.size == 0, (dtype, w_shape, pw_shape, bad[:5])


def test_losses_accept_exactly_pytorchs_weight_shapes() -> None:
    """PyTorch refuses a weight with extra leading dims (the service tolerates [1, ...]); so do we,
    with PyTorch's own error, and no fallback warning."""
    x = torch.randn(4, requires_grad=True)
    y = torch.rand(4)
    for fn in (torch_op.binary_cross_entropy_with_logits, F.binary_cross_entropy_with_logits):
        with warnings.catch_warnings():
            warnings.simplefilter("error", torch_op.FallbackWarning)
            with pytest.raises(RuntimeError):
                fn(x, y, torch.ones(1, 4))
            with pytest.raises(RuntimeError):
                fn(x, y, pos_weight=torch.ones(2, 4))


def test_cases_the_kernel_cannot_run_fall_back_to_pytorch_and_say_so_once() -> None:
    torch_op.fallback._warned.clear()
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    y = torch.rand(3, 4, 5, dtype=torch.float64)
    with pytest.warns(torch_op.FallbackWarning, match="float64"):
        torch_op.binary_cross_entropy_with_logits(x, y).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch_op.FallbackWarning)  # the same reason: said once
        torch_op.binary_cross_entropy_with_logits(x, y).backward()
    xf, yf = x.detach().float().requires_grad_(), y.float().requires_grad_()
    with pytest.warns(torch_op.FallbackWarning, match="target requires grad"):
        torch_op.binary_cross_entropy_with_logits(xf, yf).backward()
    expected = torch.autograd.grad(F.binary_cross_entropy_with_logits(xf, yf), yf)[0]
    assert torch.allclose(yf.grad, expected)  # PyTorch's backward: the target's gradient too
    xf.grad = None
    with pytest.warns(torch_op.FallbackWarning, match="stretched dims both before and after"):
        torch_op.binary_cross_entropy_with_logits(xf, y.float(), torch.rand(3, 1, 5)).backward()
    assert xf.grad is not None
    meta = torch.randn(2, 2, device="meta", requires_grad=True)
    with pytest.warns(torch_op.FallbackWarning, match="no bcetune kernel for meta"):
        torch_op.binary_cross_entropy_with_logits(meta, torch.rand(2, 2, device="meta"))


def test_double_backward_is_pytorchs_and_said_so() -> None:
    """create_graph=True differentiates PyTorch's formula on the saved input (a non-leaf, as a model's
    output is): the second derivative is PyTorch's, and the warning says why."""
    x = torch.randn(5, 7, requires_grad=True)
    y = torch.rand(5, 7)
    pw = torch.rand(7) + 0.5
    second = []
    torch_op.fallback._warned.clear()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for fn in (torch_op.binary_cross_entropy_with_logits, F.binary_cross_entropy_with_logits):
            logits = x * 1.5  # held until the second backward (the fused loss keeps only the gradient)
            (gx,) = torch.autograd.grad(fn(logits, y, pos_weight=pw), x, create_graph=True)
            second.append(torch.autograd.grad(gx.pow(2).sum(), x)[0])
        torch.autograd.grad(torch_op.binary_cross_entropy(torch.sigmoid(x), y), x, create_graph=True)
    assert torch.allclose(second[0], second[1])
    said = [str(w.message) for w in seen if issubclass(w.category, torch_op.FallbackWarning)]
    assert len(said) == 1 and "double backward" in said[0]  # once, for both losses


def test_modules_are_pytorchs_modules() -> None:
    pw = torch.rand(5)
    ours, theirs = torch_op.BCEWithLogitsLoss(pos_weight=pw, reduction="sum"), torch.nn.BCEWithLogitsLoss(pos_weight=pw)
    assert isinstance(ours, torch.nn.BCEWithLogitsLoss)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert isinstance(torch_op.BCELoss(), torch.nn.BCELoss)
    x = torch.randn(2, 5, requires_grad=True)
    theirs_loss = F.binary_cross_entropy_with_logits(x, torch.ones(2, 5), pos_weight=pw, reduction="sum")
    assert torch.allclose(ours(x, torch.ones(2, 5)), theirs_loss, rtol=1e-6)  # (the twin's loss: float32 sums)


def train(loss_fn: torch.nn.Module, steps: int, compiled: bool) -> tuple[list[float], list[list[torch.Tensor]]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 7))  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(64, 12, generator=gen)
    y = (torch.rand(64, 7, generator=gen) < 0.3).float()
    forward = (lambda a, b: loss_fn(model(a), b)) if not compiled else torch.compile(
        lambda a, b: loss_fn(model(a), b), fullgraph=True, backend="aot_eager"
    )  # fmt: skip
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad()
        loss = forward(x, y)
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return losses, grads


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "torch.compile"])
def test_a_small_model_trains_as_with_pytorchs_loss(compiled: bool) -> None:
    pw = torch.linspace(0.5, 3.0, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch_op.FallbackWarning)
        ours = train(torch_op.BCEWithLogitsLoss(pos_weight=pw), 15, compiled)
    theirs = train(torch.nn.BCEWithLogitsLoss(pos_weight=pw), 15, compiled)
    assert ours[0][-1] < ours[0][0] * 0.9  # it learns
    assert np.allclose(ours[0], theirs[0], rtol=1e-5, atol=1e-7)
    for a, b in zip(ours[1], theirs[1], strict=True):
        for ga, gb in zip(a, b, strict=True):
            assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-6)


def test_torch_compile_puts_the_operator_in_the_backward_graph() -> None:
    """BCELoss's backward is the operator; BCEWithLogits's kernel (its fused mode) is in the forward graph."""
    backend, graphs = graph_capturing_backend()
    loss_fn = torch_op.BCELoss()
    lin = torch.nn.Linear(3, 7)
    f = torch.compile(lambda a, b: loss_fn(torch.sigmoid(lin(a)), b), fullgraph=True, backend=backend)
    f(torch.randn(9, 3), torch.rand(9, 7)).backward()
    assert "bcetune.bce_grad.default" in graphs["backward"]
    assert "bcetune.bce_grad.default" not in graphs["forward"]
    assert lin.weight.grad is not None
    backend, graphs = graph_capturing_backend()
    logits_loss = torch_op.BCEWithLogitsLoss(pos_weight=torch.rand(7) + 0.5)
    g = torch.compile(lambda a, b: logits_loss(lin(a), b), fullgraph=True, backend=backend)
    g(torch.randn(9, 3), torch.rand(9, 7)).backward()
    assert "bcetune.bce_with_logits_fused.default" in graphs["forward"]
    assert not [t for t in graphs["backward"] if t.startswith("bcetune.")], graphs["backward"]


# --- tilings ------------------------------------------------------------------------------------------


def test_reloading_the_tables_forgets_what_the_npu_extension_holds_too() -> None:
    """The NPU extension's device buffers are forgotten with the host cache (registered by npu_device as it
    loads, which tilings does not import)."""
    from kernel.torch_op import npu_device, tilings

    assert npu_device.clear_device_tilings in tilings._ON_RELOAD
    forgot: list[int] = []
    tilings.on_reload(lambda: forgot.append(1))
    try:
        torch_op.reload_tables()
    finally:
        tilings._ON_RELOAD.pop()
    assert forgot == [1]


def test_the_tiling_is_resolved_once_per_kind_of_call_and_explained() -> None:
    torch_op.reload_tables()
    x = torch.randn(8, 1024, requires_grad=True)
    y = torch.rand(8, 1024)
    for _ in range(3):
        torch_op.binary_cross_entropy_with_logits(x, y).backward()
    info = torch_op.cache_info()
    assert info.misses == 1 and info.hits == 2
    used = torch_op.explain(x, y)
    assert torch_op.cache_info().hits == 3  # the same key the backward used
    assert used.soc == "Ascend910B2" and used.tiling.n == 8 * 1024
    assert used.source in ("exact", "bucket") and used.provenance["schema_version"] is not None  # the shipped table
    assert str(used).startswith("Ascend910B2 float32/mean/nw/logit/pw_none/fused n=8192: ")  # the forward's mode
    assert "from the Ascend910B2 table" in str(used)


def test_the_operator_reads_tables_from_bcetune_tables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    x = torch.randn(8, 1024)
    monkeypatch.setenv("BCETUNE_TABLES", str(tmp_path))  # an empty directory: the model answers
    answer = torch_op.explain(x, torch.rand(8, 1024))
    assert answer.source == "model" and "no table applies" in str(answer)
    monkeypatch.setenv("BCETUNE_SOC", "Ascend910B4")
    assert torch_op.explain(x, torch.rand(8, 1024)).soc == "Ascend910B4"
    monkeypatch.setenv("BCETUNE_SOC", "Ascend999")
    with pytest.raises(ValueError, match="BCETUNE_SOC='Ascend999' is not a known SoC"):
        torch_op.explain(x, torch.rand(8, 1024))
    monkeypatch.setenv("BCETUNE_SOC", "Ascend910B2")
    monkeypatch.setenv("BCETUNE_TABLES", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="tables directory does not exist"):
        torch_op.explain(x, torch.rand(8, 1024))


def test_the_cache_is_bounded() -> None:
    assert torch_op.resolved.cache_info().maxsize == torch_op.CACHE_SIZE
