/**
 * torch_npu binding of the kernel-launch library: launches bce_grad on the current NPU stream
 * with a tiling computed in Python (tiling_model) and copied to the device as bytes.
 * Built by kernel/build.sh (CANN + torch_npu); not compiled on machines without them.
 */
#include <pybind11/pybind11.h>
#include <torch/extension.h>

#include "aclrtlaunch_bce_grad.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"

namespace {

void* Ptr(const c10::optional<at::Tensor>& t) { return t.has_value() ? t->data_ptr() : nullptr; }

void Check(const at::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
    TORCH_CHECK(t.device().type() == c10::DeviceType::PrivateUse1, name, " must be on the NPU");
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
    // stream(true) drains torch_npu's task queue first, so the launch is ordered after the copies
    aclrtStream stream = c10_npu::getCurrentNPUStream().stream(true);
    uint32_t rc = ACLRT_LAUNCH_KERNEL(bce_grad)(static_cast<uint32_t>(blockDim), stream, grad.data_ptr(),
                                                logits.data_ptr(), labels.data_ptr(), Ptr(weight), Ptr(posWeight),
                                                z.data_ptr(), Ptr(workspace), tiling.data_ptr());
    TORCH_CHECK(rc == 0, "aclrtlaunch_bce_grad failed with ", rc);
}

}  // namespace

PYBIND11_MODULE(bce_grad_npu, m) {
    m.def("launch", &Launch, "Launch bce_grad on the current NPU stream", pybind11::arg("block_dim"),
          pybind11::arg("grad"), pybind11::arg("logits"), pybind11::arg("labels"), pybind11::arg("weight"),
          pybind11::arg("pos_weight"), pybind11::arg("z"), pybind11::arg("workspace"), pybind11::arg("tiling"));
}
