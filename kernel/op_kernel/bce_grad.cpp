/**
 * Kernel entry of BinaryCrossEntropyGrad (AIV only). Inputs in the requirement's order, then the
 * optional weight and pos_weight (nullptr when absent: never read), the output, the workspace
 * (a last-dim pos_weight's periodic rows) and the tiling struct in GM.
 *
 * One binary serves every variant: the tiling key inside the struct selects the dtype (unless
 * the custom-op build fixes it through DTYPE_LOGITS), BUFFER_NUM (a template parameter of the
 * kernel class) and the variant flags. The same source builds with the CANN toolchain and with
 * g++ against the CPU twin (kernel/cpu).
 */
#include "bce_grad.h"
#include "bce_grad_tiling_data.h"
#include "kernel_operator.h"

extern "C" __global__ __aicore__ void bce_grad(GM_ADDR grad, GM_ADDR logits, GM_ADDR labels, GM_ADDR weight,
                                               GM_ADDR posWeight, GM_ADDR z, GM_ADDR workspace, GM_ADDR tiling) {
    KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_AIV_ONLY);
    GET_TILING_DATA_WITH_STRUCT(BceGradTilingData, t, tiling);
#if defined(BCE_GRAD_CUSTOM_OP)
    workspace = AscendC::GetUserWorkspace(workspace);  // the framework's system workspace comes first
#endif
#if defined(DTYPE_LOGITS)
    bce_grad_kernel::Run<DTYPE_LOGITS>(grad, logits, labels, weight, posWeight, z, workspace, t);
#else
    switch (bce_grad_kernel::DecodeKey(t.tilingKey).dtype) {
        case 0:
            bce_grad_kernel::Run<float>(grad, logits, labels, weight, posWeight, z, workspace, t);
            break;
        case 1:
            bce_grad_kernel::Run<half>(grad, logits, labels, weight, posWeight, z, workspace, t);
            break;
        case 2:
            bce_grad_kernel::Run<bfloat16_t>(grad, logits, labels, weight, posWeight, z, workspace, t);
            break;
        case 3:
            bce_grad_kernel::Run<int32_t>(grad, logits, labels, weight, posWeight, z, workspace, t);
            break;
        case 4:
            bce_grad_kernel::Run<int16_t>(grad, logits, labels, weight, posWeight, z, workspace, t);
            break;
        default:
            break;
    }
#endif
}
