// bcetune::bce_with_logits_fused_loss: the fused loss with its autograd node in C++, for eager CPU steps.
//
// Why: a Python autograd.Function costs ~25 us a step in Python frames (apply, forward, backward), which
// below ~32 Ki elements is more than the fused kernel saves over PyTorch's own composite, and a C++
// torch::autograd::Function still ~3 us (its context, saved-data map and output wrapping): as much as the
// whole backward PyTorch's own runs at 1 Ki elements. Here the forward is one call of the CPU kernel
// (bce_with_logits_cpu.cpp) and a backward node written as PyTorch's generated ones are (a Node with its
// SavedVariable, set as the loss's history) keeps only the gradient; its backward returns that gradient
// itself when grad_output is exactly 1 (read from the CPU tensor's memory), else a product out of place (a
// graph kept with retain_graph=True finds the saved gradient unchanged).
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
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

namespace bcetune {
namespace {

using torch::autograd::variable_list;
using WeakTensor = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

constexpr const char* kLetGo =
    "bcetune: double backward (create_graph=True) through binary_cross_entropy_with_logits needs its input, target "
    "and weights, which the fused loss does not keep (it keeps only the gradient) and the caller no longer holds: "
    "keep references to them until the second backward, or call PyTorch's "
    "torch.nn.functional.binary_cross_entropy_with_logits for that loss";

int64_t ReductionEnum(c10::string_view r) {
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

/** The loss's backward: the kept gradient (times grad_output unless it is 1); PyTorch's formula for create_graph. */
struct FusedLossBackward : torch::autograd::Node {
  torch::autograd::SavedVariable grad;
  std::array<c10::optional<WeakTensor>, 4> inputs;  // input, target, weight, pos_weight (absent: nullopt)
  int64_t reduction = at::Reduction::Mean;

  std::string name() const override { return "BceWithLogitsFusedLossBackward"; }

  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    grad.reset_data();
  }

  variable_list apply(variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const at::Tensor& gradOutput = grads[0];
    if (!gradOutput.defined()) return {at::Tensor()};  // no gradient flows in: none flows out
    if (!at::GradMode::is_enabled()) {
      const at::Tensor g = grad.unpack();  // saved as an input, not an output: no node to name
      return {IsOne(gradOutput) ? g : g * gradOutput};
    }
    std::array<at::Tensor, 4> in;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!inputs[i].has_value()) continue;
      auto strong = inputs[i]->lock();
      TORCH_CHECK(strong.defined(), kLetGo);
      in[i] = at::Tensor(std::move(strong));
    }
    WarnFallback(in[0], "double backward (create_graph=True) is PyTorch's: the kernel is first order");
    const at::Tensor loss = at::binary_cross_entropy_with_logits(in[0], in[1], in[2], in[3], reduction);
    return {torch::autograd::grad({loss}, {in[0]}, {gradOutput}, /*retain_graph=*/true, /*create_graph=*/true)[0]};
  }
};

at::Tensor BceWithLogitsFusedLoss(const at::Tensor& input, const at::Tensor& target,
                                  const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& posWeight,
                                  c10::string_view reduction) {
  const std::array<const at::Tensor*, 4> all{&input, &target, weight ? &*weight : nullptr,
                                             posWeight ? &*posWeight : nullptr};
  static constexpr std::array<const char*, 4> kNames{"input", "target", "weight", "pos_weight"};
  for (size_t i = 1; i < all.size(); ++i) {
    TORCH_CHECK(all[i] == nullptr || !all[i]->defined() || !all[i]->requires_grad(), "bce_with_logits_fused_loss: ",
                kNames[i], " requires grad; the fused loss computes the input's gradient only");
  }
  // through the dispatcher: the profiler, dispatch modes and the operator's checks see the kernel's call
  static const auto kernel =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("bcetune::bce_with_logits_fused_cpu", "")
          .typed<std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                    const c10::optional<at::Tensor>&, const c10::optional<at::Tensor>&,
                                                    c10::string_view)>();
  at::Tensor loss, grad;
  {
    at::AutoDispatchBelowADInplaceOrView below;  // the kernel's call records no history: the node below does
    std::tie(loss, grad) = kernel.call(input, target, weight, posWeight, reduction);
  }
  if (at::GradMode::is_enabled() && input.requires_grad()) {
    auto node = c10::make_intrusive<FusedLossBackward>();
    node->set_next_edges(torch::autograd::collect_next_edges(input));
    node->grad = torch::autograd::SavedVariable(grad, /*is_output=*/false);
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i] != nullptr && all[i]->defined()) node->inputs[i] = WeakTensor(all[i]->getIntrusivePtr());
    }
    node->reduction = ReductionEnum(reduction);
    torch::autograd::set_history(loss, node);
  }
  return loss;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bcetune, m) {
  m.def(
      "bce_with_logits_fused_loss(Tensor input, Tensor target, Tensor? weight, Tensor? pos_weight, str reduction)"
      " -> Tensor");
}

// the node is built here, not by the dispatcher's autograd key: an eager CPU call, as a generated op's is
TORCH_LIBRARY_IMPL(bcetune, CompositeImplicitAutograd, m) {
  m.impl("bce_with_logits_fused_loss", &BceWithLogitsFusedLoss);
}

}  // namespace bcetune
