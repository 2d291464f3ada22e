/**
 * What both TilingFuncs (BceGrad's and BceWithLogitsFused's) read from the gert contexts and write back:
 * the call's dtype, reduction and broadcast forms, the platform's UB and vector cores, the SoC's name (the
 * tuned table's rows), and the tiling struct, block dim, key and workspace. One copy, so a new kernel mode
 * changes what it reads, not how. The arithmetic stays in the pure C++ headers (bce_grad_tiling_core.h,
 * bce_grad_tuned_tiling.h) that the tests run against tiling_model.
 *
 * Host only, CANN headers; compile-checked against the real CANN 8.5.0 headers through the op_host sources.
 */
#ifndef BCE_GRAD_TILING_CONTEXT_H
#define BCE_GRAD_TILING_CONTEXT_H

#include <cstring>
#include <string>

#include "bce_grad_tiling_core.h"
#include "bce_grad_tuned_tiling.h"
#include "bce_with_logits_fused_parts.h"
#include "platform/platform_infos_def.h"  // fe::PlatFormInfos::GetPlatformRes (closed in CANN)
#include "register/op_impl_registry.h"
#include "tiling/platform/platform_ascendc.h"

namespace bce_grad_host {

inline bool ToDtype(ge::DataType dt, bce_grad::Dtype* out) {
    switch (dt) {
        case ge::DT_FLOAT: *out = bce_grad::Dtype::Float32; return true;
        case ge::DT_FLOAT16: *out = bce_grad::Dtype::Float16; return true;
        case ge::DT_BF16: *out = bce_grad::Dtype::BFloat16; return true;
        case ge::DT_INT32: *out = bce_grad::Dtype::Int32; return true;
        case ge::DT_INT16: *out = bce_grad::Dtype::Int16; return true;
        default: return false;
    }
}

inline bool ToReduction(const char* s, bce_grad::Reduction* out) {
    if (s == nullptr || std::strcmp(s, "mean") == 0) { *out = bce_grad::Reduction::Mean; return true; }
    if (std::strcmp(s, "none") == 0) { *out = bce_grad::Reduction::None; return true; }
    if (std::strcmp(s, "sum") == 0) { *out = bce_grad::Reduction::Sum; return true; }
    return false;
}

inline bool ToWrt(const char* s, bce_grad::Wrt* out) {
    if (s == nullptr || std::strcmp(s, "logit") == 0) { *out = bce_grad::Wrt::Logit; return true; }
    if (std::strcmp(s, "probability") == 0) { *out = bce_grad::Wrt::Probability; return true; }
    return false;
}

inline bce_grad::SocFamily FamilyOf(platform_ascendc::SocVersion v) {
    if (v == platform_ascendc::SocVersion::ASCEND910B) return bce_grad::SocFamily::Ascend910B;
    if (v == platform_ascendc::SocVersion::ASCEND310B) return bce_grad::SocFamily::Ascend310B;
    return bce_grad::SocFamily::Other;
}

/** An optional input's storage dims (rank 0 and false when absent). */
inline bool OptionalDims(gert::TilingContext* context, size_t index, int64_t* dims, int64_t* rank) {
    const gert::StorageShape* s = context->GetOptionalInputShape(index);
    *rank = 0;
    if (s == nullptr) return false;
    const gert::Shape& shape = s->GetStorageShape();
    *rank = static_cast<int64_t>(shape.GetDimNum());
    for (size_t d = 0; d < shape.GetDimNum(); ++d) dims[d] = shape.GetDim(d);
    return true;
}

/**
 * The weight's and pos_weight's forms against the input's shape: weight full, last_dim, rows or scalar
 * (any shape broadcastable to the input); pos_weight absent, the input's shape or [C] along the last dim.
 * False for anything else (the kernel cannot run it).
 */
inline bool ReadForms(gert::TilingContext* context, size_t weightIndex, size_t posWeightIndex, const gert::Shape& shape,
                      bce_grad::Variant* v) {
    int64_t inDims[gert::Shape::kMaxDimNum] = {};
    for (size_t d = 0; d < shape.GetDimNum(); ++d) inDims[d] = shape.GetDim(d);
    const int64_t dims = static_cast<int64_t>(shape.GetDimNum());
    const char* err = nullptr;
    int64_t wDims[gert::Shape::kMaxDimNum] = {};
    int64_t wRank = 0;
    const bool hasWeight = OptionalDims(context, weightIndex, wDims, &wRank);
    if (bce_grad::WeightFromShape(hasWeight, wDims, wRank, inDims, dims, v, &err) != bce_grad::Status::Ok) return false;
    int64_t pwDims[gert::Shape::kMaxDimNum] = {};
    int64_t pwRank = 0;
    const bool hasPw = OptionalDims(context, posWeightIndex, pwDims, &pwRank);
    return bce_grad::PosWeightFromShape(hasPw, pwDims, pwRank, inDims, dims, v, &err) == bce_grad::Status::Ok;
}

/** The input's element count, or -1 when it is absent. */
inline int64_t ElementsOf(gert::TilingContext* context, size_t index) {
    const gert::StorageShape* s = context->GetInputShape(index);
    return s == nullptr ? -1 : s->GetStorageShape().GetShapeSize();
}

/**
 * The call's tiling as the service answers it (TunedTiling: the tuned table, re-fit at unseen sizes), on the
 * platform the context reports, written to the context: struct, block dim (an empty tensor still launches
 * one core, which finds no elements and returns), the framework's key and the workspace.
 */
inline ge::graphStatus WriteTunedTiling(gert::TilingContext* context, const gert::Shape& shape,
                                        const bce_grad::Variant& v, int64_t maxBlockDim = 0) {
    fe::PlatFormInfos* info = context->GetPlatformInfo();
    if (info == nullptr) return ge::GRAPH_FAILED;
    auto ascendc = platform_ascendc::PlatformAscendC(info);
    uint64_t reportedUb = 0;
    ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::UB, reportedUb);
    const bce_grad::Platform platform = bce_grad::PlatformFromReported(
        FamilyOf(ascendc.GetSocVersion()), static_cast<int64_t>(reportedUb), static_cast<int64_t>(ascendc.GetCoreNumAiv()));
    std::string soc;  // the full name (Ascend910B2, ...) selects the tuned table's rows
    if (!info->GetPlatformRes("version", "SoC_version", soc) || soc.empty()) soc = "unknown";

    bce_grad::TilingResult r;
    const char* err = nullptr;
    if (bce_grad::TunedTiling(soc.c_str(), shape.GetShapeSize(), v, platform, &r, &err) != bce_grad::Status::Ok) {
        return ge::GRAPH_FAILED;
    }
    if (maxBlockDim > 0 && r.blockDim > maxBlockDim) return ge::GRAPH_FAILED;
    BceGradTilingData* tiling = context->GetTilingData<BceGradTilingData>();
    size_t* workspaces = context->GetWorkspaceSizes(1);
    if (tiling == nullptr || workspaces == nullptr) return ge::GRAPH_FAILED;
    *tiling = r.data;
    context->SetSimdNumBlocks(static_cast<uint32_t>(r.blockDim > 0 ? r.blockDim : 1));
    context->SetTilingKey(bce_grad::kFrameworkTilingKey);
    workspaces[0] = ascendc.GetLibApiWorkSpaceSize() + static_cast<size_t>(bce_grad::WorkspaceBytes(v, r));
    return ge::GRAPH_SUCCESS;
}

}  // namespace bce_grad_host

#endif  // BCE_GRAD_TILING_CONTEXT_H
