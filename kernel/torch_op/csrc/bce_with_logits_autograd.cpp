// bcetune::bce_with_logits_fused_loss: the fused loss with its autograd node in C++, for eager CPU steps.
//
// Why: a Python autograd.Function costs ~25 us a step in Python frames (apply, forward, backward), which
// below ~32 Ki elements is more than the fused kernel saves over PyTorch's own composite. Here the forward is
// one call of the CPU kernel (bce_with_logits_cpu.cpp) and the node keeps only the gradient; its backward
// returns that gradient itself when grad_output is exactly 1 (checked on the host: a CPU tensor), else a
// product out of place (a graph kept with retain_graph=True finds the saved gradient unchanged).
//
// Double backward (create_graph=True) differentiates PyTorch's own formula on the caller's input, target and
// weights, which the node holds only weakly (keeping them would keep what the fused loss exists not to keep);
// it first calls bcetune::fallback_warning, which kernel/torch_op/native.py defines in Python to issue
// bcetune's FallbackWarning. An input the caller let go is a clear error, as in the Python path.
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <array>
#include <tuple>
#include <string>
#include <utility>


namespace bcetune {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

constexpr const char* kLetGo =
    "bcetune: double backward (create_graph=True) through binary_cross_entropy_with_logits needs its input, target "
    "and weights, which the fused loss does not keep (it keeps only the gradient) and the caller no longer holds: "
    "keep references to them until the second backward, or call PyTorch's "
    "torch.nn.functional.binary_cross_entropy_with_logits for that loss";

/** The loss's four tensor arguments, held weakly (an absent optional stays undefined). */
struct WeakInputs : torch::CustomClassHolder {
  std::array<c10::optional<WeakTensor>, 4> refs;

  /** The tensors while the caller still holds them; TORCH_CHECK fails naming what to do otherwise. */
  std::array<at::Tensor, 4> Lock() const {
    std::array<at::Tensor, 4> out;
    for (size_t i = 0; i < refs.size(); ++i) {
      if (!refs[i].has_value()) continue;
      auto strong = refs[i]->lock();
      TORCH_CHECK(strong.defined(), kLetGo);
      out[i] = at::Tensor(std::move(strong));
    }
    return out;
  }
};

int64_t ReductionEnum(const std::string& r) {
  if (r == "none") return at::Reduction::None;
  if (r == "sum") return at::Reduction::Sum;
  return at::Reduction::Mean;
}

/**
 * Exactly 1 everywhere: a 0-dim 1 (loss.backward()) or one 1 expanded (a sum's backward, stride 0). The one
 * element is read from memory (a CPU tensor: no device to synchronise; no op dispatched, ~1 us less a step).
 */
bool IsOne(const at::Tensor& g) {
  if (!g.device().is_cpu() || g.numel() == 0) return false;
  for (int64_t s : g.strides()) {
    if (s != 0) return false;
  }
  double value = 0.0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, g.scalar_type(), "IsOne", [&] {
    value = static_cast<double>(*g.const_data_ptr<scalar_t>());
  });
  return value == 1.0;
}

void WarnFallback(const at::Tensor& like, const char* why) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("bcetune::fallback_warning", "")
                             .typed<void(const at::Tensor&, c10::string_view)>();
  op.call(like, why);
}

struct FusedLoss : torch::autograd::Function<FusedLoss> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& target,
                            const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& posWeight,
                            const std::string& reduction) {
    // through the dispatcher: the profiler, dispatch modes and the operator's checks see the kernel's call
    static const auto kernel =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("bcetune::bce_with_logits_fused_cpu", "")
            .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                      const c10::optional<at::Tensor>&,
                                                      const c10::optional<at::Tensor>&, c10::string_view)>();
    auto [loss, grad] = kernel.call(input, target, weight, posWeight, reduction);
    ctx->save_for_backward({grad});
    auto weak = c10::make_intrusive<WeakInputs>();
    const std::array<const at::Tensor*, 4> all{&input, &target, weight ? &*weight : nullptr,
                                               posWeight ? &*posWeight : nullptr};
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] != nullptr && all[i]->defined()) weak->refs[i] = WeakTensor(all[i]->getIntrusivePtr());
    }
    ctx->saved_data["inputs"] = c10::IValue::make_capsule(std::move(weak));
    ctx->saved_data["reduction"] = reduction;
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor& gradOutput = grads[0];
    at::Tensor dx;
    if (at::GradMode::is_enabled()) {  // create_graph: differentiate PyTorch's formula instead
      const auto holder = ctx->saved_data["inputs"].toCapsule();
      const auto in = static_cast<const WeakInputs*>(holder.get())->Lock();
      WarnFallback(in[0], "double backward (create_graph=True) is PyTorch's: the kernel is first order");
      const int64_t red = ReductionEnum(ctx->saved_data["reduction"].toStringRef());
      const at::Tensor loss = at::binary_cross_entropy_with_logits(in[0], in[1], in[2], in[3], red);
      dx = torch::autograd::grad({loss}, {in[0]}, {gradOutput}, /*retain_graph=*/true, /*create_graph=*/true)[0];
    } else {
      const at::Tensor grad = ctx->get_saved_variables()[0];
      dx = IsOne(gradOutput) ? grad : grad * gradOutput;
    }
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

at::Tensor BceWithLogitsFusedLoss(const at::Tensor& input, const at::Tensor& target,
                                  const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& posWeight,
                                  c10::string_view reduction) {
  const std::array<std::pair<const char*, const at::Tensor*>, 3> others{
      {{"target", &target}, {"weight", weight ? &*weight : nullptr}, {"pos_weight", posWeight ? &*posWeight : nullptr}}};
  for (const auto& [name, t] : others) {
    TORCH_CHECK(t == nullptr || !t->defined() || !t->requires_grad(), "bce_with_logits_fused_loss: ", name,
                " requires grad; the fused loss computes the input's gradient only");
  }
  return FusedLoss::apply(input, target, weight, posWeight, std::string(reduction.data(), reduction.size()));
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bcetune, m) {
  m.def(
      "bce_with_logits_fused_loss(Tensor input, Tensor target, Tensor? weight, Tensor? pos_weight, str reduction)"
      " -> Tensor");
}

// the node is built here, not by the dispatcher's autograd key: an eager CPU call, as a Python Function's apply
TORCH_LIBRARY_IMPL(bcetune, CompositeImplicitAutograd, m) {
  m.impl("bce_with_logits_fused_loss", &BceWithLogitsFusedLoss);
}

}  // namespace bcetune
