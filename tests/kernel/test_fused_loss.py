"""The default CPU path of ``bcetune.torch``'s BCEWithLogits loss: one fused call (loss and gradient in the
forward; the native CPU kernel, and its ATen fallback) that keeps only the gradient for backward, against
PyTorch's float64 autograd; the operator ``bcetune::bce_with_logits_fused`` through torch.library.opcheck;
torch.compile; grad_output other than 1; double backward; the switch to the twin (``$BCETUNE_CPU_LOSS``)."""

from __future__ import annotations

import warnings
from collections import Counter
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import graph_capturing_backend
from torch.utils._python_dispatch import TorchDispatchMode

from kernel import cpu as twin
from kernel import torch_op
from kernel.torch_op import losses, native

N, C = 96, 1031  # the shape: a last dim that is no multiple of anything
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
#: weight and pos_weight forms PyTorch and the kernel both take, as shapes of an [N, C] input
FORMS = [(None, None), ((C,), (C,)), ((N, C), None), ((N, 1), (C,)), ((), (N, C)), ((1,), None)]
#: the fused call as the loss's forward makes it on the CPU: the native kernel's operator where it is built
#: (always, here: make installs g++'s build of it), the operator whose CPU implementation is ATen's calls
FUSED_OPS = ("bcetune.bce_with_logits_fused", "bcetune.bce_with_logits_fused_cpu")


def fused_calls(ops: Ops) -> int:
    return sum(ops.seen[name] for name in FUSED_OPS)


@pytest.fixture(params=["native", "aten"])
def cpu_kernel(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each CPU implementation of the fused call: the native kernel, and the ATen composite that runs where
    it cannot be built."""
    if request.param == "native":
        assert native.load(), native.native_error()
    else:
        monkeypatch.setattr(native, "_state", {"loaded": False, "error": "(the test's choice)"})
    return str(request.param)


@pytest.fixture(autouse=True)
def _default_cpu_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The default CPU path, fused at every size (small shapes keep these tests fast; the size below which
    the loss is PyTorch's own has its own test)."""
    monkeypatch.delenv("BCETUNE_CPU_LOSS", raising=False)
    monkeypatch.setattr(losses, "FUSED_MIN_ELEMENTS", 0)


def inputs(
    w_shape: tuple[int, ...] | None, pw_shape: tuple[int, ...] | None, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
    """float64 logits (some far out), hard and soft labels, weights."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(N, C, generator=gen, dtype=torch.float64) * 3
    x[0, :40] = torch.linspace(-40, 40, 40, dtype=torch.float64)
    soft = torch.rand(N, C, generator=gen, dtype=torch.float64)
    y = torch.where(torch.rand(N, C, generator=gen) < 0.7, (soft < 0.3).double(), soft)
    w = None if w_shape is None else torch.rand(w_shape, generator=gen, dtype=torch.float64) + 0.5
    pw = None if pw_shape is None else torch.rand(pw_shape, generator=gen, dtype=torch.float64) * 3 + 0.25
    return x, y, w, pw


class Ops(TorchDispatchMode):
    """The operators a region dispatches (its top level: a custom op's own ATen calls are its own)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_the_loss_keeps_one_tensor_runs_one_call_and_is_pytorchs_float64(reduction: str, cpu_kernel: str) -> None:
    """BCEWithLogitsLoss with weight [C] and pos_weight [C]: one input-sized tensor saved for backward (the
    gradient), one fused call and no separate sigmoid in forward, loss and gradient within 1e-5 relative of
    PyTorch's float64."""
    x64, y64, w64, pw64 = inputs((C,), (C,))
    loss_fn = torch_op.BCEWithLogitsLoss(weight=w64.float(), pos_weight=pw64.float(), reduction=reduction)
    x = x64.float().requires_grad_()
    saved: list[torch.Size] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.shape)
        return t

    with warnings.catch_warnings(), Ops() as ops, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        warnings.simplefilter("error", torch_op.FallbackWarning)
        loss = loss_fn(x, y64.float())
    assert [s for s in saved if s.numel() >= N * C] == [x.shape], saved
    assert fused_calls(ops) == 1 and "aten.sigmoid" not in ops.seen, ops.seen
    upstream = torch.ones_like(loss)
    loss.backward(upstream)
    ref_x = x.detach().double().requires_grad_()  # PyTorch in float64 on the float32 values
    ref = F.binary_cross_entropy_with_logits(ref_x, y64.float().double(), w64.float().double(),
                                             pos_weight=pw64.float().double(), reduction=reduction)  # fmt: skip
    ref.backward(upstream.double())
    assert float((loss.detach().double() - ref.detach()).abs().max() / ref.detach().abs().max()) < 1e-5
    assert float((x.grad.double() - ref_x.grad).abs().max() / ref_x.grad.abs().max()) < 1e-5


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize(("w_shape", "pw_shape"), FORMS)
def test_every_dtype_form_and_reduction_is_pytorchs_float64_within_the_dtypes_rounding(
    dtype: str, reduction: str, w_shape: tuple[int, ...] | None, pw_shape: tuple[int, ...] | None, cpu_kernel: str
) -> None:
    """Computed in float32 whatever the dtype: each gradient element within a few of the dtype's roundings
    of the float64 result (eps relative to the largest, or the subnormals' spacing), the loss too (a float16
    sum past 65504 is inf, as PyTorch's own in float16 is); in float32 never much less accurate than
    PyTorch's own float32 path."""
    dt = DTYPES[dtype]
    x64, y64, w64, pw64 = inputs(w_shape, pw_shape, seed=len(FORMS) * 7)
    cast = lambda t: None if t is None else t.to(dt)  # noqa: E731
    x = cast(x64).requires_grad_()
    loss = torch_op.binary_cross_entropy_with_logits(x, cast(y64), cast(w64), reduction=reduction,
                                                     pos_weight=cast(pw64))  # fmt: skip
    upstream = torch.randn(loss.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    loss.backward(upstream.to(dt))
    d = lambda t: None if t is None else t.to(dt).double()  # noqa: E731
    ref_x = d(x64).requires_grad_()
    ref = F.binary_cross_entropy_with_logits(ref_x, d(y64), d(w64), reduction=reduction, pos_weight=d(pw64))
    ref.backward(d(upstream))
    eps, top = float(torch.finfo(dt).eps), float(torch.finfo(dt).max)
    step = float(torch.finfo(dt).tiny) * eps  # the subnormals' spacing: a mean's float16 gradients live there
    if float(ref.abs().max()) > top:  # the dtype cannot hold the sum: inf, as PyTorch's own in the dtype
        assert bool(torch.isinf(loss).any())
    else:
        assert float((loss.double() - ref).abs().max()) < 8 * (eps * float(ref.abs().max()) + step)
    assert float((x.grad.double() - ref_x.grad).abs().max()) < 8 * (eps * float(ref_x.grad.abs().max()) + step)
    if dtype == "float32":  # and never less accurate than PyTorch's own float32 path on the same values
        x32 = x.detach().clone().requires_grad_()
        theirs = F.binary_cross_entropy_with_logits(x32, cast(y64), cast(w64), reduction=reduction,
                                                    pos_weight=cast(pw64))  # fmt: skip
        theirs.backward(upstream.to(dt))
        ours_err = (x.grad.double() - ref_x.grad).abs().max()
        assert float(ours_err) <= 1.5 * float((x32.grad.double() - ref_x.grad).abs().max()) + 1e-12


def test_grad_output_of_one_returns_the_saved_gradient_itself_and_others_scale_it() -> None:
    x64, y64, w64, pw64 = inputs((C,), (C,))
    x, y = x64.float().requires_grad_(), y64.float()
    ptrs: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        ptrs.append(t.data_ptr())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = torch_op.binary_cross_entropy_with_logits(x, y, w64.float(), pos_weight=pw64.float())
    (g1,) = torch.autograd.grad(loss, x, retain_graph=True)
    assert g1.data_ptr() == ptrs[0]  # no copy, no multiply: the gradient the forward wrote
    (g2,) = torch.autograd.grad(loss, x, torch.tensor(2.5), retain_graph=True)
    assert torch.equal(g2, g1 * 2.5) and g2.data_ptr() != ptrs[0]
    (g3,) = torch.autograd.grad(loss, x)  # the saved gradient unchanged by the scaled backward
    assert torch.equal(g3, g1)
    # reduction none: a sum's gradient (ones, expanded) is 1 too; a mean's or a mask's scales it
    none = torch_op.binary_cross_entropy_with_logits(x, y, reduction="none")
    (gs,) = torch.autograd.grad(none.sum(), x, retain_graph=True)
    (gm,) = torch.autograd.grad(none.mean(), x, retain_graph=True)
    mask = (torch.rand(N, C) < 0.5).float()
    (gk,) = torch.autograd.grad((none * mask).sum(), x)
    assert torch.allclose(gm, gs / (N * C)) and torch.equal(gk, gs * mask)


def test_gradcheck_of_the_fused_loss() -> None:
    """Finite differences of the float32 loss against its float32 gradient (gradcheck in float64 on a
    float32 function: eps and tolerances sized for float32)."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(6, 37, generator=gen, dtype=torch.float64).requires_grad_()
    y = (torch.rand(6, 37, generator=gen) < 0.5).float()
    w, pw = torch.rand(6, 1, generator=gen) + 0.5, torch.rand(37, generator=gen) * 2 + 0.5
    for reduction in ("none", "sum", "mean"):

        def f(x64: torch.Tensor, reduction: str = reduction) -> torch.Tensor:
            return torch_op.binary_cross_entropy_with_logits(x64.float(), y, w, reduction=reduction,
                                                             pos_weight=pw).double()  # fmt: skip

        assert torch.autograd.gradcheck(f, (x,), eps=1e-2, atol=2e-3, rtol=2e-2, nondet_tol=0.0)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_opcheck_passes(dtype: str, reduction: str, cpu_kernel: str) -> None:
    x64, y64, w64, pw64 = inputs((C,), (N, C))
    dt = DTYPES[dtype]
    args = (x64.to(dt), y64.to(dt), w64.to(dt), pw64.to(dt), reduction)
    torch.library.opcheck(torch.ops.bcetune.bce_with_logits_fused.default, args)
    empty = torch.empty(0, 5, dtype=dt)  # (a mean of nothing is nan, as PyTorch's: opcheck's compare says nan != nan)
    torch.library.opcheck(torch.ops.bcetune.bce_with_logits_fused.default, (empty, empty, None, None, "sum"))


def test_the_operator_refuses_bad_arguments_naming_them() -> None:
    op = torch.ops.bcetune.bce_with_logits_fused
    x = torch.randn(4, 5)
    with pytest.raises(ValueError, match="reduction 'avg': expected one of none, sum, mean"):
        op(x, x, None, None, "avg")
    with pytest.raises(ValueError, match=r"target has shape \(4, 4\); it must be the input's, \(4, 5\)"):
        op(x, torch.rand(4, 4), None, None, "sum")
    with pytest.raises(ValueError, match=r"pos_weight has shape \(3,\), which does not broadcast"):
        op(x, x, None, torch.rand(3), "sum")
    with pytest.raises(ValueError, match="input is torch.int32"):
        op(x.int(), x.int(), None, None, "sum")
    with pytest.raises(ValueError, match=r"\$BCETUNE_CPU_LOSS='gpu': expected one of fast, twin"):
        import os

        os.environ["BCETUNE_CPU_LOSS"] = "gpu"
        try:
            torch_op.binary_cross_entropy_with_logits(x.requires_grad_(), torch.rand(4, 5))
        finally:
            del os.environ["BCETUNE_CPU_LOSS"]


def test_double_backward_is_pytorchs_while_the_caller_holds_the_inputs_else_one_clear_error() -> None:
    x = torch.randn(5, 7, requires_grad=True)
    y = torch.rand(5, 7)
    pw = torch.rand(7) + 0.5
    torch_op.fallback._warned.clear()
    second = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for fn in (torch_op.binary_cross_entropy_with_logits, F.binary_cross_entropy_with_logits):
            logits = x * 1.5  # held until the second backward, as a gradient penalty's code holds it
            (gx,) = torch.autograd.grad(fn(logits, y, pos_weight=pw), x, create_graph=True)
            second.append(torch.autograd.grad(gx.pow(2).sum(), x)[0])
    assert torch.allclose(second[0], second[1])
    assert any("double backward" in str(w.message) for w in seen if issubclass(w.category, torch_op.FallbackWarning))
    loss = torch_op.binary_cross_entropy_with_logits(x * 1.5, y, pos_weight=pw)  # its logits let go
    with pytest.raises(RuntimeError, match="keeps only the gradient.*keep references to them"):
        torch.autograd.grad(loss, x, create_graph=True)


def test_torch_compile_traces_the_fused_call_into_the_forward_graph() -> None:
    backend, graphs = graph_capturing_backend()
    pw = torch.rand(7) + 0.5
    loss_fn = torch_op.BCEWithLogitsLoss(pos_weight=pw)
    lin = torch.nn.Linear(3, 7)
    a, b = torch.randn(9, 3), torch.rand(9, 7)
    f = torch.compile(lambda a, b: loss_fn(lin(a), b), fullgraph=True, backend=backend)
    f(a, b).backward()
    assert "bcetune.bce_with_logits_fused.default" in graphs["forward"]
    assert not [t for t in graphs["backward"] if t.startswith("bcetune.") or "sigmoid" in t], graphs["backward"]
    got = lin.weight.grad.clone()
    lin.weight.grad = None
    F.binary_cross_entropy_with_logits(lin(a), b, pos_weight=pw).backward()
    assert torch.allclose(got, lin.weight.grad, rtol=1e-5, atol=1e-7)


def test_bce_loss_on_the_cpu_is_pytorchs_own_and_the_twin_is_one_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    p = torch.rand(4, 6).clamp(0.05, 0.95).requires_grad_()
    y = torch.rand(4, 6)
    with Ops() as ops:
        torch_op.BCELoss()(p, y).backward()
    assert "aten.binary_cross_entropy_backward" in ops.seen and "bcetune.bce_grad" not in ops.seen
    monkeypatch.setenv("BCETUNE_CPU_LOSS", "twin")
    with Ops() as ops:
        torch_op.BCELoss()(p, y).backward()
    assert ops.seen["bcetune.bce_grad"] == 1


def test_the_twin_runs_the_kernels_fused_mode_keeping_only_the_gradient(monkeypatch: pytest.MonkeyPatch) -> None:
    """``$BCETUNE_CPU_LOSS=twin``: BCEWithLogits is the kernel's fused entry in the CPU twin (the operator's
    CPU implementation then; its tiling the service's for the fused mode): the loss and dx are the twin's,
    bit for bit, one tensor is kept, no sigmoid and no other kernel runs; PyTorch's float64 within 1e-5."""
    monkeypatch.setenv("BCETUNE_CPU_LOSS", "twin")
    x64, y64, w64, pw64 = inputs((C,), (C,))
    x, y, w, pw = (t.float() for t in (x64, y64, w64, pw64))
    saved: list[torch.Size] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.shape)
        return t

    for reduction in ("none", "sum", "mean"):
        saved.clear()
        xg = x.clone().requires_grad_()
        with Ops() as ops, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = torch_op.binary_cross_entropy_with_logits(xg, y, w, pos_weight=pw, reduction=reduction)
        loss.backward(torch.ones_like(loss))
        assert [s for s in saved if s.numel() >= N * C] == [x.shape], saved
        assert ops.seen["bcetune.bce_with_logits_fused"] == 1 and "bcetune.bce_grad" not in ops.seen, ops.seen
        assert not [k for k in ops.seen if "sigmoid" in k or k == "bcetune.bce_with_logits_fused_cpu"], ops.seen
        used = torch_op.explain(x, y, w, pw, reduction)
        assert used.tiling.variant.mode == "fused"
        arrays = (t.numpy() for t in (x, y, w, pw))
        want_loss, want_dx = twin.bce_with_logits_fused(*arrays, reduction=reduction, soc=used.soc,
                                                        params=used.tiling.params)  # fmt: skip
        assert torch.equal(xg.grad, torch.from_numpy(want_dx))
        assert torch.equal(loss.detach(), torch.from_numpy(want_loss).reshape(loss.shape))
        ref_x = x.double().requires_grad_()
        ref = F.binary_cross_entropy_with_logits(ref_x, y.double(), w.double(), pos_weight=pw.double(),
                                                 reduction=reduction)  # fmt: skip
        ref.backward(torch.ones_like(ref))
        assert float((loss.detach().double() - ref.detach()).abs().max() / ref.detach().abs().max()) < 1e-5
        assert float((xg.grad.double() - ref_x.grad).abs().max() / ref_x.grad.abs().max()) < 1e-5


@pytest.mark.parametrize("n", [1, 1024])
def test_with_the_native_build_a_small_loss_is_fused_too(n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The C++ autograd node costs less than PyTorch's own composite at any size: no crossover, one call."""
    assert native.load(), native.native_error()
    monkeypatch.setattr(losses, "FUSED_MIN_ELEMENTS", 1 << 15)  # the shipped crossover: not consulted
    x = torch.randn(n, requires_grad=True)
    with warnings.catch_warnings(), Ops() as ops:
        warnings.simplefilter("error", torch_op.FallbackWarning)
        torch_op.binary_cross_entropy_with_logits(x, torch.rand(n)).backward()
    assert fused_calls(ops) == 1 and "aten.binary_cross_entropy_with_logits" not in ops.seen, ops.seen
    assert x.grad is not None and x.grad.shape == (n,)


def test_below_the_crossover_the_python_function_gives_way_to_pytorchs_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the native build (the ATen composite through the Python Function), small inputs run PyTorch's
    own loss, without a warning; from the crossover on, the fused call."""
    assert losses.FUSED_MIN_ELEMENTS == 0  # this module's fixture; the shipped crossover:
    monkeypatch.undo()
    monkeypatch.delenv("BCETUNE_CPU_LOSS", raising=False)
    monkeypatch.setattr(native, "_state", {"loaded": False, "error": "(the test's choice)"})
    crossover = losses.FUSED_MIN_ELEMENTS
    assert crossover <= N * C  # the 96 x 1031 is fused
    for n, fused in (crossover - 1, False), (crossover, True):
        x = torch.randn(n, requires_grad=True)
        with warnings.catch_warnings(), Ops() as ops:
            warnings.simplefilter("error", torch_op.FallbackWarning)
            torch_op.binary_cross_entropy_with_logits(x, torch.rand(n)).backward()
        assert (fused_calls(ops) == 1) is fused, ops.seen
        assert ("aten.binary_cross_entropy_with_logits" in ops.seen) is not fused, ops.seen
