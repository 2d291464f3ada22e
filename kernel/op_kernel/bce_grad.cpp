/**
 * Kernel entry of BinaryCrossEntropyGrad (AIV only). Inputs in the requirement's order, then the
 * optional weight and pos_weight (nullptr when absent: never read), the output, the workspace
 * (a last-dim pos_weight's periodic rows) and the tiling struct in GM.
 *
 * One source, both CANN build flows:
 *   - kernel launch (ascendc_library, kernel/CMakeLists.txt): that flow generates no tiling
 *     macros, so the kernel reads the struct's int64 fields from GM itself (LoadTiling);
 *   - custom op (msopgen project, kernel/build.sh --op-package, which adds -DBCE_GRAD_CUSTOM_OP):
 *     the struct is registered with REGISTER_TILING_DEFAULT, so the op compiler generates
 *     GET_TILING_DATA_WITH_STRUCT, and the framework's system workspace precedes ours.
 *
 * The framework's tiling key is always 0 (one kernel per dtype, no TILING_KEY_IS branches); the
 * variant key travels inside the struct (tilingKey) and selects the dtype (unless the custom-op
 * build fixes it per binary through DTYPE_LOGITS), BUFFER_NUM (a template parameter of the kernel
 * class) and the variant flags at run time. The same source builds with g++ against the CPU twin
 * (kernel/cpu), in either flow.
 */
#include "bce_grad.h"
#include "bce_grad_tiling_data.h"
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void bce_grad(GM_ADDR grad, GM_ADDR logits, GM_ADDR labels, GM_ADDR weight,
                                               GM_ADDR posWeight, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling) {
#if !(defined(__NPU_ARCH__) && __NPU_ARCH__ == 3002)
    // Atlas 200I/500 A2 (dav-m300, arch 3002) takes no kernel type: the op compiler refuses one there.
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
#endif
#if defined(BCE_GRAD_CUSTOM_OP)
    REGISTER_TILING_DEFAULT(BceGradTilingData);
    GET_TILING_DATA_WITH_STRUCT(BceGradTilingData, t, tiling);
    workspace = AscendC::GetUserWorkspace(workspace);  // the framework's system workspace comes first
#else
    BceGradTilingData t;
    bce_grad_kernel::LoadTiling(&t, tiling);
#endif
#if defined(DTYPE_LOGITS)
    bce_grad_kernel::Run<DTYPE_LOGITS>(grad, logits, labels, weight, posWeight, z, nullptr, workspace, t);
#else
    switch (bce_grad_kernel::DecodeKey(t.tilingKey).dtype) {
        case 0:
            bce_grad_kernel::Run<float>(grad, logits, labels, weight, posWeight, z, nullptr, workspace, t);
            break;
        case 1:
            bce_grad_kernel::Run<half>(grad, logits, labels, weight, posWeight, z, nullptr, workspace, t);
            break;
        case 2:
            bce_grad_kernel::Run<bfloat16_t>(grad, logits, labels, weight, posWeight, z, nullptr, workspace, t);
            break;
        case 3:
            bce_grad_kernel::Run<int32_t>(grad, logits, labels, weight, posWeight, z, nullptr, workspace, t);
            break;
        case 4:
            bce_grad_kernel::Run<int16_t>(grad, logits, labels, weight, posWeight, z, nullptr, workspace, t);
            break;
        default:
            break;
    }
#endif
}
