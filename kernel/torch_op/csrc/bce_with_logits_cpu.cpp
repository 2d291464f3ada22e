// bcetune::bce_with_logits_fused_cpu: BCEWithLogits's loss and its gradient wrt the logits in one pass over
// the inputs on a CPU (the CPU kernel of the fused loss: kernel/torch_op/fused.py calls it).
//
// Per element, with e = exp(-|x|), l = log1p(e), lw = 1 + (pw - 1) y, s = sigmoid(x), r = sigmoid(-x):
//   loss = w (lw l + (x >= 0 ? (1 - y) x : -pw y x))    PyTorch's (1 - y) x + lw softplus(-x), with
//                                                        softplus(-x) = max(-x, 0) + l: two terms of one sign
//   grad = w scale ((1 - y) s - pw y r)                 lw s - pw y rearranged: no 1 - s cancelled
// s and r both from e (one exp, one log per element), scale = 1/N for mean. float16 / bfloat16 are computed in float32, as the NPU kernel computes them.
//
// Vectorised with ATen's own Vectorized<float> (its exp / log1p are SLEEF's, as ATen's CPU kernels use
// them); the capability is the one the build names (-DCPU_CAPABILITY_AVX512 / _AVX2, or none: ATen's scalar
// fallback). Work is split into fixed chunks of CHUNK elements whatever the thread count, and the loss sums
// of the chunks are added in chunk order in double: sum and mean are the same bits run to run.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace bcetune {
namespace {

using Vec = at::vec::Vectorized<float>;
constexpr int64_t kChunk = 16384;  // elements per parallel work item (a multiple of kBlock)
constexpr int64_t kBlock = 1024;   // elements converted to float at a time for float16 / bfloat16

// How a weight operand is laid over the input seen as rows of its last dimension.
enum class Layout { One, Scalar, Full, Row, Column };

struct Operand {
  Layout layout = Layout::One;
  at::Tensor data;  // contiguous: the input's dtype for Full (read block by block), float32 otherwise
};

// One stretch of elements where each weight is either one value (stride 0) or contiguous (stride 1).
struct Stretch {
  const float* x;
  const float* y;
  const float* w;
  int64_t w_step;
  const float* pw;
  int64_t pw_step;
  float* loss;  // null for sum / mean
  float* grad;
  int64_t n;
};

inline Vec LoadWeight(const float* p, int64_t step) { return step ? Vec::loadu(p) : Vec(*p); }

inline float ScalarStep(float x, float y, float w, float pw, float scale, float* grad, double* acc) {
  float e = std::exp(-std::fabs(x));
  float inv = 1.0f / (1.0f + e);
  float s = x >= 0.0f ? inv : e * inv;
  float r = x >= 0.0f ? e * inv : inv;
  float lw = 1.0f + (pw - 1.0f) * y;
  float loss = w * (lw * std::log1p(e) + (x >= 0.0f ? (1.0f - y) * x : -pw * y * x));
  *grad = w * scale * ((1.0f - y) * s - pw * y * r);
  *acc += loss;
  return loss;
}

// Runs one stretch; returns the sum of its loss (double, accumulated per vector block of floats).
double RunStretch(const Stretch& t, float scale) {
  const Vec one(1.0f), zero(0.0f), vscale(scale);
  double total = 0.0;
  int64_t i = 0;
  const int64_t width = Vec::size();
  Vec acc(0.0f);
  for (; i + width <= t.n; i += width) {
    Vec x = Vec::loadu(t.x + i);
    Vec y = Vec::loadu(t.y + i);
    Vec w = LoadWeight(t.w + i * t.w_step, t.w_step);
    Vec pw = LoadWeight(t.pw + i * t.pw_step, t.pw_step);
    Vec e = x.abs().neg().exp();
    Vec u = one + e;
    Vec inv = one / u;
    Vec ge = x >= zero;  // all-ones lanes where x >= 0
    Vec s = Vec::blendv(e * inv, inv, ge);
    Vec r = Vec::blendv(inv, e * inv, ge);
    Vec lw = one + (pw - one) * y;
    // log1p(e) as log(u) corrected by the rounding of u = 1 + e (cheaper than log1p, as exact)
    Vec l = u.log() - ((u - one) - e) * inv;
    Vec linear = Vec::blendv((pw * y * x).neg(), (one - y) * x, ge);
    Vec loss = w * (lw * l + linear);
    Vec grad = w * vscale * ((one - y) * s - pw * y * r);
    grad.store(t.grad + i);
    if (t.loss) {
      loss.store(t.loss + i);
    } else {
      acc = acc + loss;
    }
    if (((i / width) & 63) == 63) {  // flush the float lanes into double every 64 vectors
      float lanes[Vec::size()];
      acc.store(lanes);
      for (float v : lanes) total += v;
      acc = Vec(0.0f);
    }
  }
  float lanes[Vec::size()];
  acc.store(lanes);
  for (float v : lanes) total += v;
  for (; i < t.n; ++i) {
    float l = ScalarStep(t.x[i], t.y[i], t.w[i * t.w_step], t.pw[i * t.pw_step], scale, t.grad + i, &total);
    if (t.loss) t.loss[i] = l;
  }
  return t.loss ? 0.0 : total;
}

// Whether every dimension before the last is stretched (stride 0) or of size 1.
bool LeadingStretched(const at::Tensor& e) {
  for (int64_t k = 0; k + 1 < e.dim(); ++k) {
    if (e.size(k) != 1 && e.stride(k) != 0) return false;
  }
  return true;
}

Operand LayOut(const c10::optional<at::Tensor>& maybe, const at::Tensor& input) {
  Operand op;
  if (!maybe.has_value() || !maybe->defined()) return op;
  TORCH_CHECK(maybe->scalar_type() == input.scalar_type(), "bce_with_logits_fused_cpu: a weight is ",
              maybe->scalar_type(), " but input is ", input.scalar_type());
  const at::Tensor e = maybe->expand(input.sizes());  // a view: no copy yet
  const int64_t dims = e.dim();
  const int64_t last = dims ? e.size(dims - 1) : 1;
  if (maybe->numel() == 1) {
    op.layout = Layout::Scalar;
    op.data = maybe->reshape({1}).to(at::kFloat).contiguous();
  } else if (e.is_contiguous()) {
    op.layout = Layout::Full;
    op.data = e;
  } else if (dims >= 1 && LeadingStretched(e) && (last == 1 || e.stride(dims - 1) == 1)) {
    op.layout = Layout::Row;  // [C] (or [1, .., C]): one value per column
    at::Tensor v = e;
    while (v.dim() > 1) v = v.select(0, 0);
    op.data = v.to(at::kFloat).contiguous();
  } else if (dims >= 2 && e.stride(dims - 1) == 0 && e.select(dims - 1, 0).is_contiguous()) {
    op.layout = Layout::Column;  // [.., N, 1]: one value per row (the flat index / C)
    op.data = e.select(dims - 1, 0).to(at::kFloat).contiguous();
  } else {
    op.layout = Layout::Full;  // any other broadcast: stretched to the input's shape once
    op.data = e.contiguous();
  }
  return op;
}

// The stretches of [begin, end) for one weight layout pair: split at row ends where a layout needs it.
template <typename Fn>
void ForStretches(int64_t begin, int64_t end, int64_t row, Layout a, Layout b, Fn&& fn) {
  const bool by_row = a == Layout::Row || a == Layout::Column || b == Layout::Row || b == Layout::Column;
  if (!by_row) {
    fn(begin, end);
    return;
  }
  for (int64_t i = begin; i < end;) {
    int64_t stop = std::min(end, (i / row + 1) * row);
    fn(i, stop);
    i = stop;
  }
}

struct WeightView {
  const float* base;
  int64_t step;
};

WeightView ViewAt(const Operand& op, const float& one, int64_t index, int64_t row) {
  switch (op.layout) {
    case Layout::One:
      return {&one, 0};
    case Layout::Scalar:
      return {op.data.data_ptr<float>(), 0};
    case Layout::Full:
      return {op.data.data_ptr<float>() + index, 1};
    case Layout::Row:
      return {op.data.data_ptr<float>() + index % row, 1};
    case Layout::Column:
      return {op.data.data_ptr<float>() + index / row, 0};
  }
  return {&one, 0};
}

// float16 / bfloat16 <-> float32, ATen's vectorised conversions (round to nearest even back to T).
template <typename T>
void ToFloat(const T* src, float* dst, int64_t n) {
  using VecT = at::vec::Vectorized<T>;
  int64_t k = 0;
  for (; k + VecT::size() <= n; k += VecT::size()) {
    auto [lo, hi] = at::vec::convert_to_float<T>(VecT::loadu(src + k));
    lo.store(dst + k);
    hi.store(dst + k + Vec::size());
  }
  for (; k < n; ++k) dst[k] = static_cast<float>(src[k]);
}

template <typename T>
void FromFloat(const float* src, T* dst, int64_t n) {
  using VecT = at::vec::Vectorized<T>;
  int64_t k = 0;
  for (; k + VecT::size() <= n; k += VecT::size()) {
    at::vec::convert_from_float<T>(Vec::loadu(src + k), Vec::loadu(src + k + Vec::size())).store(dst + k);
  }
  for (; k < n; ++k) dst[k] = static_cast<T>(src[k]);
}

// A weight's values for the block [b, b + n): a full one converted into `buffer`, else its float view.
template <typename T>
WeightView BlockOf(const Operand& op, const float& one, int64_t b, int64_t n, int64_t row, float* buffer) {
  if (op.layout != Layout::Full) return ViewAt(op, one, b, row);
  ToFloat(op.data.const_data_ptr<T>() + b, buffer, n);
  return {buffer, 1};
}

template <typename T>
double RunChunk(const T* x, const T* y, const Operand& w, const Operand& pw, T* loss, T* grad, int64_t begin,
                int64_t end, int64_t row, float scale) {
  const float one = 1.0f;
  double total = 0.0;
  ForStretches(begin, end, row, w.layout, pw.layout, [&](int64_t lo, int64_t hi) {
    if constexpr (std::is_same_v<T, float>) {
      WeightView wv = ViewAt(w, one, lo, row);
      WeightView pv = ViewAt(pw, one, lo, row);
      total += RunStretch({x + lo, y + lo, wv.base, wv.step, pv.base, pv.step, loss ? loss + lo : nullptr,
                           grad + lo, hi - lo},
                          scale);
    } else {  // block by block through float buffers (a stretch never crosses a row end: views stay valid)
      float fx[kBlock], fy[kBlock], fw[kBlock], fp[kBlock], fl[kBlock], fg[kBlock];
      for (int64_t b = lo; b < hi; b += kBlock) {
        const int64_t n = std::min(kBlock, hi - b);
        ToFloat(x + b, fx, n);
        ToFloat(y + b, fy, n);
        WeightView wv = BlockOf<T>(w, one, b, n, row, fw);
        WeightView pv = BlockOf<T>(pw, one, b, n, row, fp);
        total += RunStretch({fx, fy, wv.base, wv.step, pv.base, pv.step, loss ? fl : nullptr, fg, n}, scale);
        FromFloat(fg, grad + b, n);
        if (loss) FromFloat(fl, loss + b, n);
      }
    }
  });
  return total;
}

template <typename T>
double RunAll(const at::Tensor& x, const at::Tensor& y, const Operand& w, const Operand& pw, at::Tensor* loss,
              at::Tensor& grad, float scale) {
  const int64_t n = x.numel();
  const int64_t row = x.dim() ? std::max<int64_t>(x.size(x.dim() - 1), 1) : 1;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
  const T* px = x.const_data_ptr<T>();
  const T* py = y.const_data_ptr<T>();
  T* pl = loss ? loss->mutable_data_ptr<T>() : nullptr;
  T* pg = grad.mutable_data_ptr<T>();
  at::parallel_for(0, chunks, 1, [&](int64_t first, int64_t last) {
    for (int64_t c = first; c < last; ++c) {
      partial[c] = RunChunk<T>(px, py, w, pw, pl, pg, c * kChunk, std::min(n, (c + 1) * kChunk), row, scale);
    }
  });
  double total = 0.0;
  for (double p : partial) total += p;  // in chunk order: the same bits whatever the thread count
  return total;
}

std::tuple<at::Tensor, at::Tensor> BceWithLogitsFusedCpu(const at::Tensor& input, const at::Tensor& target,
                                                          const c10::optional<at::Tensor>& weight,
                                                          const c10::optional<at::Tensor>& pos_weight,
                                                          c10::string_view reduction) {
  TORCH_CHECK(reduction == "none" || reduction == "sum" || reduction == "mean",
              "bce_with_logits_fused_cpu: reduction must be none, sum or mean, got ", reduction);
  TORCH_CHECK(target.sizes() == input.sizes(), "bce_with_logits_fused_cpu: target has shape ", target.sizes(),
              "; it must be the input's, ", input.sizes());
  TORCH_CHECK(target.scalar_type() == input.scalar_type(), "bce_with_logits_fused_cpu: target is ",
              target.scalar_type(), " but input is ", input.scalar_type());
  const at::Tensor x = input.contiguous();
  const at::Tensor y = target.contiguous();
  const Operand w = LayOut(weight, x);
  const Operand pw = LayOut(pos_weight, x);
  const bool none = reduction == "none";
  const int64_t n = x.numel();
  const float scale = reduction == "mean" && n ? 1.0f / static_cast<float>(n) : 1.0f;
  at::Tensor grad = at::empty_like(x, at::MemoryFormat::Contiguous);
  at::Tensor loss = none ? at::empty_like(x, at::MemoryFormat::Contiguous) : at::Tensor();
  double total = 0.0;
  switch (x.scalar_type()) {
    case at::kFloat:
      total = RunAll<float>(x, y, w, pw, none ? &loss : nullptr, grad, scale);
      break;
    case at::kHalf:
      total = RunAll<at::Half>(x, y, w, pw, none ? &loss : nullptr, grad, scale);
      break;
    case at::kBFloat16:
      total = RunAll<at::BFloat16>(x, y, w, pw, none ? &loss : nullptr, grad, scale);
      break;
    default:
      TORCH_CHECK(false, "bce_with_logits_fused_cpu: input is ", x.scalar_type(),
                  "; it takes float32, float16 and bfloat16");
  }
  if (!none) {
    if (reduction == "mean") total = n ? total / static_cast<double>(n) : std::numeric_limits<double>::quiet_NaN();
    loss = at::scalar_tensor(total, x.options().dtype(at::kDouble)).to(x.scalar_type());
  }
  return {loss, grad};
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(bcetune, m) {
  m.def(
      "bce_with_logits_fused_cpu(Tensor input, Tensor target, Tensor? weight, Tensor? pos_weight, str reduction)"
      " -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(bcetune, CPU, m) { m.impl("bce_with_logits_fused_cpu", &BceWithLogitsFusedCpu); }

}  // namespace bcetune
