/**
 * The BceGrad TilingFunc (ops-nn layout: op_host/<op>_tiling.cpp). The tiling arithmetic, the UB
 * budget from what the platform reports and the pos_weight form are bce_grad_tiling_core.h; the
 * knobs are the service's (bce_grad_tuned_tiling.h: the tuned table, re-fit by the cost model at
 * unseen sizes). All three are pure C++ and tested against tiling_model; this file only reads the
 * call and the platform from the gert contexts and writes the struct the kernel reads.
 *
 * Built by kernel/build.sh inside an msopgen project with CANN (ASCEND_HOME_PATH set). Without
 * CANN it is compile-checked against the real CANN 8.5.0 headers (tests/kernel/test_cann_compile.py) as the
 * tiling library and as the proto library; it has not run on a device.
 */
#include <cstring>
#include <string>

#include "bce_grad_tiling_core.h"
#include "bce_grad_tuned_tiling.h"
#include "platform/platform_infos_def.h"  // fe::PlatFormInfos::GetPlatformRes (closed in CANN)
#include "register/op_impl_registry.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {

namespace {

enum InputIndex { kGrad = 0, kLogits = 1, kLabels = 2, kWeight = 3, kPosWeight = 4 };
enum AttrIndex { kReductionAttr = 0, kWrtAttr = 1 };

bool ToDtype(ge::DataType dt, bce_grad::Dtype* out) {
    switch (dt) {
        case ge::DT_FLOAT: *out = bce_grad::Dtype::Float32; return true;
        case ge::DT_FLOAT16: *out = bce_grad::Dtype::Float16; return true;
        case ge::DT_BF16: *out = bce_grad::Dtype::BFloat16; return true;
        case ge::DT_INT32: *out = bce_grad::Dtype::Int32; return true;
        case ge::DT_INT16: *out = bce_grad::Dtype::Int16; return true;
        default: return false;
    }
}

bool ToReduction(const char* s, bce_grad::Reduction* out) {
    if (s == nullptr || std::strcmp(s, "mean") == 0) { *out = bce_grad::Reduction::Mean; return true; }
    if (std::strcmp(s, "none") == 0) { *out = bce_grad::Reduction::None; return true; }
    if (std::strcmp(s, "sum") == 0) { *out = bce_grad::Reduction::Sum; return true; }
    return false;
}

bool ToWrt(const char* s, bce_grad::Wrt* out) {
    if (s == nullptr || std::strcmp(s, "logit") == 0) { *out = bce_grad::Wrt::Logit; return true; }
    if (std::strcmp(s, "probability") == 0) { *out = bce_grad::Wrt::Probability; return true; }
    return false;
}

bce_grad::SocFamily FamilyOf(platform_ascendc::SocVersion v) {
    if (v == platform_ascendc::SocVersion::ASCEND910B) return bce_grad::SocFamily::Ascend910B;
    if (v == platform_ascendc::SocVersion::ASCEND310B) return bce_grad::SocFamily::Ascend310B;
    return bce_grad::SocFamily::Other;
}

/** The call's variant from its inputs and attributes; false for anything the kernel cannot run. */
bool ReadVariant(gert::TilingContext* context, const gert::Shape& shape, bce_grad::Variant* v) {
    const auto* logitsDesc = context->GetInputDesc(kLogits);
    const gert::RuntimeAttrs* attrs = context->GetAttrs();
    if (logitsDesc == nullptr || attrs == nullptr || !ToDtype(logitsDesc->GetDataType(), &v->dtype) ||
        !ToReduction(attrs->GetAttrPointer<char>(kReductionAttr), &v->reduction) ||
        !ToWrt(attrs->GetAttrPointer<char>(kWrtAttr), &v->wrt)) {
        return false;
    }
    const int64_t n = shape.GetShapeSize();
    const gert::StorageShape* grad = context->GetInputShape(kGrad);
    const int64_t gradElems = grad == nullptr ? -1 : grad->GetStorageShape().GetShapeSize();
    if (gradElems != (v->reduction == bce_grad::Reduction::None ? n : 1)) {
        return false;  // none: grad has the input's shape; sum/mean: one scalar
    }
    const int64_t dims = static_cast<int64_t>(shape.GetDimNum());
    const char* err = nullptr;
    const gert::StorageShape* weight = context->GetOptionalInputShape(kWeight);
    int64_t inDims[gert::Shape::kMaxDimNum] = {};
    int64_t wDims[gert::Shape::kMaxDimNum] = {};
    for (size_t d = 0; d < shape.GetDimNum(); ++d) inDims[d] = shape.GetDim(d);
    int64_t wRank = 0;
    if (weight != nullptr) {
        const gert::Shape& ws = weight->GetStorageShape();
        wRank = static_cast<int64_t>(ws.GetDimNum());
        for (size_t d = 0; d < ws.GetDimNum(); ++d) wDims[d] = ws.GetDim(d);
    }
    // any shape broadcastable to the input: full, last_dim, rows or scalar (else refused)
    if (bce_grad::WeightFromShape(weight != nullptr, wDims, wRank, inDims, dims, v, &err) != bce_grad::Status::Ok) {
        return false;
    }
    // absent, the input's shape, or [C] along the last dim (else refused)
    const gert::StorageShape* pw = context->GetOptionalInputShape(kPosWeight);
    int64_t pwDims[gert::Shape::kMaxDimNum] = {};
    int64_t pwRank = 0;
    if (pw != nullptr) {
        const gert::Shape& ps = pw->GetStorageShape();
        pwRank = static_cast<int64_t>(ps.GetDimNum());
        for (size_t d = 0; d < ps.GetDimNum(); ++d) pwDims[d] = ps.GetDim(d);
    }
    return bce_grad::PosWeightFromShape(pw != nullptr, pwDims, pwRank, inDims, dims, v, &err) == bce_grad::Status::Ok;
}

ge::graphStatus TilingBceGrad(gert::TilingContext* context) {
    fe::PlatFormInfos* info = context->GetPlatformInfo();
    const gert::StorageShape* logitsShape = context->GetInputShape(kLogits);
    if (info == nullptr || logitsShape == nullptr) return ge::GRAPH_FAILED;
    const gert::Shape& shape = logitsShape->GetStorageShape();

    auto ascendc = platform_ascendc::PlatformAscendC(info);
    uint64_t reportedUb = 0;
    ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::UB, reportedUb);
    const bce_grad::Platform platform = bce_grad::PlatformFromReported(
        FamilyOf(ascendc.GetSocVersion()), static_cast<int64_t>(reportedUb), static_cast<int64_t>(ascendc.GetCoreNumAiv()));

    bce_grad::Variant v;
    if (!ReadVariant(context, shape, &v)) return ge::GRAPH_FAILED;

    std::string soc;  // the full name (Ascend910B2, ...) selects the tuned table's rows
    if (!info->GetPlatformRes("version", "SoC_version", soc) || soc.empty()) soc = "unknown";

    bce_grad::TilingResult r;
    const char* err = nullptr;
    if (bce_grad::TunedTiling(soc.c_str(), shape.GetShapeSize(), v, platform, &r, &err) != bce_grad::Status::Ok) {
        return ge::GRAPH_FAILED;
    }
    BceGradTilingData* tiling = context->GetTilingData<BceGradTilingData>();
    size_t* workspaces = context->GetWorkspaceSizes(1);
    if (tiling == nullptr || workspaces == nullptr) return ge::GRAPH_FAILED;
    *tiling = r.data;
    // an empty tensor still launches one core, which finds no elements and returns
    context->SetSimdNumBlocks(static_cast<uint32_t>(r.blockDim > 0 ? r.blockDim : 1));
    context->SetTilingKey(bce_grad::kFrameworkTilingKey);
    workspaces[0] = ascendc.GetLibApiWorkSpaceSize() + static_cast<size_t>(bce_grad::WorkspaceBytes(v, r));
    return ge::GRAPH_SUCCESS;
}

}  // namespace

IMPL_OP_OPTILING(BceGrad).Tiling(TilingBceGrad);

}  // namespace optiling
