/**
 * torch_npu binding of the kernel-launch library, two entry points:
 *
 * - ``launch``: one launch with a tiling computed in Python and already on the device (the tuner's
 *   timing loop, kernel/npu.py);
 * - the ``PrivateUse1`` kernels of ``bcetune::bce_grad`` and ``bcetune::bce_with_logits_fused`` (the
 *   operators kernel/torch_op defines; the second launches the kernel's fused mode, bce_with_logits_fused),
 *   registered with the dispatcher when this library loads. Their tilings live in a bounded LRU of
 *   device buffers keyed by everything a tiling depends on (device, kernel mode, dtypes, shapes, reduction,
 *   wrt): a hit launches with no host-to-device copy; a miss asks the Python resolver set by
 *   ``set_resolver`` (the tables the service answers from) and uploads the struct once.
 *
 * Built by kernel/build.sh (CANN + torch_npu). NOT RUN on bcetune's CI (no NPU): compiled there against
 * the real torch and torch_npu headers (tests/kernel/test_npu_ext.py); the cache itself is
 * tiling_cache.h, tested on the host.
 */
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <torch/extension.h>
#include <torch/library.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "aclrtlaunch_bce_grad.h"
#include "aclrtlaunch_bce_with_logits_fused.h"
#include "tiling_cache.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace py = pybind11;

namespace {

void* Ptr(const c10::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr() : nullptr; }

void Check(const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, name, " must be on the NPU");
}

uint32_t LaunchOnStream(int64_t blockDim, const at::Tensor& grad, const at::Tensor& logits, const at::Tensor& labels,
                        const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& posWeight,
                        at::Tensor& z, void* workspace, const at::Tensor& tiling) {
    // stream(true) drains torch_npu's task queue first, so the launch is ordered after the copies
    aclrtStream stream = c10_npu::getCurrentNPUStream().stream(true);
    return ACLRT_LAUNCH_KERNEL(bce_grad)(static_cast<uint32_t>(blockDim), stream, grad.data_ptr(), logits.data_ptr(),
                                         labels.data_ptr(), Ptr(weight), Ptr(posWeight), z.data_ptr(), workspace,
                                         tiling.data_ptr());
}

/** Enqueue one launch; z, workspace and tiling are device tensors prepared by kernel/npu.py. */
void Launch(int64_t blockDim, const at::Tensor& grad, const at::Tensor& logits, const at::Tensor& labels,
            const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& posWeight, at::Tensor& z,
            const c10::optional<at::Tensor>& workspace, const at::Tensor& tiling) {
    Check(grad, "grad");
    Check(logits, "logits");
    Check(labels, "labels");
    Check(z, "z");
    Check(tiling, "tiling");
    TORCH_CHECK(blockDim >= 1 && blockDim <= 65535, "blockDim must be in [1, 65535]");
    uint32_t rc = LaunchOnStream(blockDim, grad, logits, labels, weight, posWeight, z, Ptr(workspace), tiling);
    TORCH_CHECK(rc == 0, "aclrtlaunch_bce_grad failed with ", rc);
}

// --- the operator's NPU kernel -------------------------------------------------------------------

/** A tiling on the device: the struct's bytes, the block count, the workspace it needs. */
struct DeviceTiling {
    at::Tensor bytes;
    int64_t blockDim = 0;
    int64_t workspaceBytes = 0;
};

constexpr std::size_t kDefaultCapacity = 1024;

bce_grad::LruCache<std::string, DeviceTiling>& Tilings() {
    static auto* cache = new bce_grad::LruCache<std::string, DeviceTiling>(kDefaultCapacity);  // never freed:
    return *cache;  // device tensors must not be released after the NPU runtime shuts down at exit
}

py::object& Resolver() {
    static auto* resolver = new py::object();  // never freed: outlives the interpreter's teardown
    return *resolver;
}

std::string DtypeName(const c10::optional<at::Tensor>& t) {
    if (!t.has_value()) {
        return "";
    }
    switch (t->scalar_type()) {
        case at::kFloat: return "float32";
        case at::kHalf: return "float16";
        case at::kBFloat16: return "bfloat16";
        case at::kInt: return "int32";
        case at::kShort: return "int16";
        default: return c10::toString(t->scalar_type());
    }
}

void AppendShape(std::string& key, const c10::optional<at::Tensor>& t) {
    if (!t.has_value()) {
        key += "-;";
        return;
    }
    for (int64_t d : t->sizes()) {
        key += std::to_string(d);
        key += ',';
    }
    key += ';';
}

py::object ShapeOf(const c10::optional<at::Tensor>& t) {
    if (!t.has_value()) {
        return py::none();
    }
    return py::cast(t->sizes().vec());
}

/** Ask the Python resolver for the tiling of this call and put it on the device (a cache miss). */
DeviceTiling Resolve(const std::vector<c10::optional<at::Tensor>>& operands, const std::string& reduction,
                     const std::string& wrt, const std::string& mode, const at::Device& device) {
    py::gil_scoped_acquire gil;
    TORCH_CHECK(!Resolver().is_none(), "bcetune::bce_grad on the NPU needs kernel.torch_op loaded (its resolver)");
    py::list shapes, dtypes;
    for (const auto& t : operands) {
        shapes.append(ShapeOf(t));
        dtypes.append(DtypeName(t));
    }
    py::tuple answer;
    try {
        answer = Resolver()(device.index(), shapes, dtypes, reduction, wrt, mode);
    } catch (py::error_already_set& e) {
        TORCH_CHECK_VALUE(false, e.what());  // the resolver's message (a bad shape or dtype) as a ValueError
    }
    std::string raw = answer[0].cast<std::string>();
    DeviceTiling out;
    out.blockDim = answer[1].cast<int64_t>();
    out.workspaceBytes = answer[2].cast<int64_t>();
    at::Tensor host = at::empty({static_cast<int64_t>(raw.size())}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(host.data_ptr(), raw.data(), raw.size());
    out.bytes = host.to(device);  // the one host-to-device copy of this tiling
    return out;
}

/** The device tiling of a call: from the LRU, or resolved (validating the call) and uploaded once. */
std::optional<DeviceTiling> Cached(const std::vector<c10::optional<at::Tensor>>& operands, const std::string& red,
                                   const std::string& wrt, const std::string& mode, const at::Device& device) {
    std::string key = std::to_string(device.index()) + '|' + mode + '|' + red + '|' + wrt + '|';
    for (const auto& t : operands) {
        key += DtypeName(t);
        key += ':';
        AppendShape(key, t);
    }
    std::optional<DeviceTiling> tiling = Tilings().Get(key);
    if (!tiling.has_value()) {
        tiling = Resolve(operands, red, wrt, mode, device);  // validates the call (ValueError naming what is wrong)
        Tilings().Put(key, *tiling);
    }
    return tiling;
}

at::Tensor BceGradNpu(const at::Tensor& grad, const at::Tensor& p, const at::Tensor& y,
                      const c10::optional<at::Tensor>& weight, const c10::optional<at::Tensor>& posWeight,
                      c10::string_view reduction, c10::string_view wrt) {
    const std::vector<c10::optional<at::Tensor>> operands{grad, p, y, weight, posWeight};
    const char* names[] = {"grad", "p", "y", "weight", "pos_weight"};
    for (std::size_t i = 0; i < operands.size(); ++i) {
        if (operands[i].has_value()) {
            TORCH_CHECK_VALUE(operands[i]->device() == p.device(), names[i], " is on ", operands[i]->device(),
                              " but p is on ", p.device());
        }
    }
    std::string red(reduction.data(), reduction.size());
    std::string w(wrt.data(), wrt.size());
    std::optional<DeviceTiling> tiling = Cached(operands, red, w, "grad", p.device());
    at::Tensor z = at::empty(p.sizes(), p.options().memory_format(at::MemoryFormat::Contiguous));
    if (tiling->blockDim == 0) {
        return z;  // an empty tensor: nothing to launch
    }
    at::Tensor g = grad.contiguous(), pc = p.contiguous(), yc = y.contiguous();
    c10::optional<at::Tensor> wc = weight.has_value() ? c10::optional<at::Tensor>(weight->contiguous()) : c10::nullopt;
    c10::optional<at::Tensor> pwc =
        posWeight.has_value() ? c10::optional<at::Tensor>(posWeight->contiguous()) : c10::nullopt;
    // the workspace (last-dim rows) is written before it is read: uninitialised memory from the allocator
    at::Tensor ws;
    if (tiling->workspaceBytes > 0) {
        ws = at::empty({tiling->workspaceBytes}, p.options().dtype(at::kByte));
    }
    uint32_t rc =
        LaunchOnStream(tiling->blockDim, g, pc, yc, wc, pwc, z, ws.defined() ? ws.data_ptr() : nullptr, tiling->bytes);
    TORCH_CHECK(rc == 0, "aclrtlaunch_bce_grad failed with ", rc);
    return z;
}

/**
 * bcetune::bce_with_logits_fused on the NPU: one launch of the kernel's fused mode reads x, y and the weights
 * once and writes dx (the gradient at grad_output 1, 1/N in it for mean) and the loss: for none in the input's
 * shape; for sum and mean one float per core, added here on the device in core order (a run repeats) and
 * divided by N for mean.
 */
std::tuple<at::Tensor, at::Tensor> FusedNpu(const at::Tensor& input, const at::Tensor& target,
                                            const c10::optional<at::Tensor>& weight,
                                            const c10::optional<at::Tensor>& posWeight, c10::string_view reduction) {
    const std::vector<c10::optional<at::Tensor>> operands{c10::nullopt, input, target, weight, posWeight};
    const char* names[] = {"grad", "input", "target", "weight", "pos_weight"};
    for (std::size_t i = 1; i < operands.size(); ++i) {
        if (operands[i].has_value()) {
            TORCH_CHECK_VALUE(operands[i]->device() == input.device(), names[i], " is on ", operands[i]->device(),
                              " but input is on ", input.device());
        }
    }
    std::string red(reduction.data(), reduction.size());
    std::optional<DeviceTiling> tiling = Cached(operands, red, "logit", "fused", input.device());
    const at::TensorOptions like = input.options().memory_format(at::MemoryFormat::Contiguous);
    at::Tensor dx = at::empty(input.sizes(), like);
    const bool none = red == "none";
    at::Tensor loss = none ? at::empty(input.sizes(), like)
                           : at::zeros({std::max<int64_t>(tiling->blockDim, 1)}, input.options().dtype(at::kFloat));
    if (tiling->blockDim > 0) {
        at::Tensor xc = input.contiguous(), yc = target.contiguous();
        c10::optional<at::Tensor> wc =
            weight.has_value() ? c10::optional<at::Tensor>(weight->contiguous()) : c10::nullopt;
        c10::optional<at::Tensor> pwc =
            posWeight.has_value() ? c10::optional<at::Tensor>(posWeight->contiguous()) : c10::nullopt;
        at::Tensor ws;
        if (tiling->workspaceBytes > 0) {
            ws = at::empty({tiling->workspaceBytes}, input.options().dtype(at::kByte));
        }
        aclrtStream stream = c10_npu::getCurrentNPUStream().stream(true);
        uint32_t rc = ACLRT_LAUNCH_KERNEL(bce_with_logits_fused)(
            static_cast<uint32_t>(tiling->blockDim), stream, xc.data_ptr(), yc.data_ptr(), Ptr(wc), Ptr(pwc),
            dx.data_ptr(), loss.data_ptr(), ws.defined() ? ws.data_ptr() : nullptr, tiling->bytes.data_ptr());
        TORCH_CHECK(rc == 0, "aclrtlaunch_bce_with_logits_fused failed with ", rc);
    }
    if (none) {
        return {loss, dx};
    }
    at::Tensor total = loss.sum();  // the cores' sums in order
    if (red == "mean") {
        total = total / static_cast<double>(input.numel());  // nan for an empty input, as PyTorch's mean
    }
    return {total.to(input.scalar_type()), dx};
}

}  // namespace

TORCH_LIBRARY_IMPL(bcetune, PrivateUse1, m) {
    m.impl("bce_grad", &BceGradNpu);
    m.impl("bce_with_logits_fused", &FusedNpu);
}

PYBIND11_MODULE(bce_grad_npu, m) {
    m.def("launch", &Launch, "Launch bce_grad on the current NPU stream", py::arg("block_dim"), py::arg("grad"),
          py::arg("logits"), py::arg("labels"), py::arg("weight"), py::arg("pos_weight"), py::arg("z"),
          py::arg("workspace"), py::arg("tiling"));
    m.def(
        "set_resolver", [](py::object fn) { Resolver() = std::move(fn); },
        "The callable (device, shapes, dtypes, reduction, wrt, mode) -> (bytes, block_dim, workspace_bytes) a miss "
        "asks");
    m.def(
        "set_capacity", [](std::size_t n) { Tilings().SetCapacity(n); }, "How many device tilings are kept");
    m.def(
        "clear_tilings", [] { Tilings().Clear(); }, "Drop every cached device tiling (after the tables change)");
    m.def(
        "tiling_stats",
        [] {
            bce_grad::CacheStats s = Tilings().Stats();
            py::dict d;
            d["hits"] = s.hits;
            d["misses"] = s.misses;
            d["evictions"] = s.evictions;
            d["size"] = s.size;
            d["capacity"] = s.capacity;
            return d;
        },
        "Hits, misses, evictions, size and capacity of the device tiling cache");
}
