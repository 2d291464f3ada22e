"""The fused loss's native CPU kernel (``kernel/torch_op/csrc``): built here with g++ against the installed
torch, it reads every weight layout (a value per column, per row, one value, full, any other broadcast) as
PyTorch's float64 loss does, its sums are the same bits whatever the thread count, and where it cannot be
built the loss says why and runs its ATen composite."""

from __future__ import annotations

import shutil

import pytest
import torch
import torch.nn.functional as F

from kernel.torch_op import fused, native

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="the native kernel is built with g++")
SHAPE = (4, 6, 37)
#: weight shapes of a [4, 6, 37] input: per column, per row, one value, full, and broadcasts the kernel
#: stretches once (a middle dim, a leading one)
WEIGHTS = [(37,), (1, 1, 37), (6, 1), (4, 6, 1), (), (1,), SHAPE, (4, 1, 37), (1, 6, 37), (4, 1, 1), (6, 37)]


def OP(*args: object) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: N802
    """The native kernel's operator (built on first use)."""
    assert native.load(), native.native_error()
    return torch.ops.bcetune.bce_with_logits_fused_cpu(*args)


def reference(x: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None, pw: torch.Tensor | None,
              reduction: str) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """PyTorch's loss and input gradient at grad_output 1, in float64 on the same values."""
    d = lambda t: None if t is None else t.double()  # noqa: E731
    x64 = d(x).requires_grad_()
    loss = F.binary_cross_entropy_with_logits(x64, d(y), d(w), reduction=reduction, pos_weight=d(pw))
    (grad,) = torch.autograd.grad(loss, x64, torch.ones_like(loss))
    return loss.detach(), grad


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(SHAPE, generator=gen) * 6
    x.view(-1)[:24] = torch.tensor([-100.0, 100.0, -89.0, 89.0, -30.0, 30.0, 0.0, -0.0] * 3)
    y = torch.where(torch.rand(SHAPE, generator=gen) < 0.6, (torch.rand(SHAPE, generator=gen) < 0.5).float(),
                    torch.rand(SHAPE, generator=gen))  # fmt: skip
    return x, y


def test_it_is_built_and_used_here() -> None:
    assert native.load(), native.native_error()
    assert native.native_error() is None
    assert native.library_path("g++", native.capability()).exists()


@pytest.mark.parametrize("w_shape", WEIGHTS, ids=str)
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_every_weight_layout_is_pytorchs_float64(w_shape: tuple[int, ...], reduction: str) -> None:
    """Loss and gradient within a few float32 roundings of the largest value (as weight and as pos_weight;
    logits out to +-100, hard and soft labels)."""
    assert native.load()
    x, y = inputs()
    gen = torch.Generator().manual_seed(len(w_shape))
    w = torch.rand(w_shape, generator=gen) + 0.5
    pw = torch.rand(w_shape, generator=gen) * 3 + 0.25
    for weight, pos_weight in ((w, None), (None, pw), (w, pw)):
        loss, grad = OP(x, y, weight, pos_weight, reduction)
        ref_loss, ref_grad = reference(x, y, weight, pos_weight, reduction)
        assert loss.shape == ref_loss.shape and loss.dtype == grad.dtype == torch.float32
        eps = float(torch.finfo(torch.float32).eps)
        assert float((loss.double() - ref_loss).abs().max()) <= 8 * eps * float(ref_loss.abs().max())
        assert float((grad.double() - ref_grad).abs().max()) <= 8 * eps * float(ref_grad.abs().max())


def test_a_non_contiguous_input_and_a_strided_weight_are_read_as_pytorch_reads_them() -> None:
    x, y = inputs(1)
    xt, yt = x.transpose(0, 2), y.transpose(0, 2)  # [37, 6, 4], not contiguous
    w = (torch.rand(4, 2) + 0.5)[:, 0]  # [4], a stride of 2
    loss, grad = OP(xt, yt, w, None, "none")
    ref_loss, ref_grad = reference(xt, yt, w, None, "none")
    assert float((loss.double() - ref_loss).abs().max()) <= 1e-6 * float(ref_loss.abs().max())
    assert float((grad.double() - ref_grad).abs().max()) <= 1e-6 * float(ref_grad.abs().max())


def test_sums_are_the_same_bits_whatever_the_thread_count() -> None:
    """Chunks of a fixed size, their sums added in order: one thread and two give the same loss."""
    gen = torch.Generator().manual_seed(5)
    x, y = torch.randn(300_001, generator=gen), torch.rand(300_001, generator=gen)
    threads = torch.get_num_threads()
    try:
        got = []
        for n in (1, 2, 1):
            torch.set_num_threads(n)
            got.append(OP(x, y, None, None, "sum"))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(g[0], got[0][0]) and torch.equal(g[1], got[0][1]) for g in got)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_are_computed_in_float32_and_rounded_once(dtype: torch.dtype) -> None:
    """float16 / bfloat16: the float32 computation on the widened values, rounded once to the dtype."""
    x, y = inputs(2)
    w = torch.rand(37) + 0.5
    loss, grad = OP(x.to(dtype), y.to(dtype), w.to(dtype), None, "none")
    want_loss, want_grad = OP(x.to(dtype).float(), y.to(dtype).float(), w.to(dtype).float(), None, "none")
    assert loss.dtype == grad.dtype == dtype
    assert torch.equal(loss, want_loss.to(dtype)) and torch.equal(grad, want_grad.to(dtype))


def test_without_a_compiler_the_loss_says_why_and_runs_the_aten_composite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native, "_state", {})
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    assert not native.load()
    assert "no C++ compiler" in (native.native_error() or "")
    x, y = inputs(3)
    w = torch.rand(37) + 0.5
    loss, grad = fused.bce_with_logits_fused(x, y, w, None, "mean")  # the operator's CPU implementation
    want_loss, want_grad = fused.aten_fused(x, y, w, None, "mean")
    assert torch.equal(loss, want_loss) and torch.equal(grad, want_grad)


def test_the_kernel_refuses_what_it_cannot_compute_naming_it() -> None:
    assert native.load()
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError, match="reduction must be none, sum or mean, got avg"):
        OP(x, x, None, None, "avg")
    with pytest.raises(RuntimeError, match=r"target has shape \[3, 3\]; it must be the input's, \[3, 4\]"):
        OP(x, torch.rand(3, 3), None, None, "sum")
    with pytest.raises(RuntimeError, match="input is Double"):
        OP(x.double(), x.double(), None, None, "sum")


def test_the_loss_operator_builds_its_backward_node_in_cpp_keeping_only_the_gradient() -> None:
    """``bcetune::bce_with_logits_fused_loss`` (what the CPU loss calls): one kernel call, a C++ node keeping
    one tensor (the gradient); its backward is PyTorch's float64 one; a gradient wanted for the target is
    refused naming it; no grad mode, no node."""
    assert native.load(), native.native_error()
    op = native.fused_loss()
    x, y = inputs(5)
    x.requires_grad_()
    w, pw = torch.rand(37) + 0.5, torch.rand(6, 1) + 0.5
    saved: list[torch.Size] = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.shape) or t, lambda t: t):
        loss = op(x, y, w, pw, "mean")
    assert loss.grad_fn is not None and loss.grad_fn.name() == "BceWithLogitsFusedLossBackward"
    assert saved == [x.shape]
    loss.backward()
    ref_loss, ref_grad = reference(x.detach(), y, w, pw, "mean")
    assert float((loss.detach().double() - ref_loss).abs()) < 1e-6 * float(ref_loss.abs())
    assert float((x.grad.double() - ref_grad).abs().max()) < 1e-6 * float(ref_grad.abs().max())
    with pytest.raises(RuntimeError, match="target requires grad; the fused loss computes the input's gradient"):
        op(x, y.clone().requires_grad_(), None, None, "sum")
    with torch.no_grad():
        assert op(x, y, None, None, "sum").grad_fn is None
