/**
 * CANN host side of the BceGrad custom operator: TilingFunc, shape/dtype inference and the
 * OpDef. The tiling arithmetic is bce_grad_tiling_core.h (pure C++, tested against tiling_model
 * here); this file only reads the platform and the call from the gert::TilingContext, looks up
 * the tuned knobs (bce_grad_tuned_table.h) and writes the struct the kernel reads.
 *
 * Built by kernel/build.sh inside an msopgen project with CANN (ASCEND_HOME_PATH set). Not
 * compiled on machines without CANN: it is kept correct by the CANN documentation and mirrors the
 * tested core field for field.
 */
#include <cstring>
#include <string>

#include "bce_grad_tiling_core.h"
#include "bce_grad_tuned_table.h"
#include "register/op_def_registry.h"
#include "tiling/platform/platform_ascendc.h"

namespace optiling {

namespace {

enum InputIndex { kGrad = 0, kLogits = 1, kLabels = 2, kWeight = 3, kPosWeight = 4 };

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

}  // namespace

static ge::graphStatus TilingFunc(gert::TilingContext* context) {
    auto ascendc = platform_ascendc::PlatformAscendC(context->GetPlatformInfo());
    uint64_t ubBytes = 0;
    ascendc.GetCoreMemSize(platform_ascendc::CoreMemType::UB, ubBytes);
    bce_grad::Platform platform;
    platform.ubBytes = static_cast<int64_t>(ubBytes);
    // AscendC keeps 256 B, and 8 KiB more by default on A2 training/800I parts (tiling_model SoC profiles)
    platform.ubReserveBytes = ascendc.GetSocVersion() == platform_ascendc::SocVersion::ASCEND310B ? 256 : 256 + 8192;
    platform.aivCores = static_cast<int64_t>(ascendc.GetCoreNumAiv());

    const gert::StorageShape* logitsShape = context->GetInputShape(kLogits);
    if (logitsShape == nullptr) return ge::GRAPH_FAILED;
    const gert::Shape& shape = logitsShape->GetStorageShape();
    const int64_t n = shape.GetShapeSize();

    bce_grad::Variant v;
    if (!ToDtype(context->GetInputDesc(kLogits)->GetDataType(), &v.dtype)) return ge::GRAPH_FAILED;
    const gert::RuntimeAttrs* attrs = context->GetAttrs();
    if (!ToReduction(attrs->GetAttrPointer<char>(0), &v.reduction)) return ge::GRAPH_FAILED;
    const char* wrt = attrs->GetAttrPointer<char>(1);
    v.wrt = (wrt != nullptr && std::strcmp(wrt, "probability") == 0) ? bce_grad::Wrt::Probability : bce_grad::Wrt::Logit;
    v.weight = context->GetOptionalInputShape(kWeight) != nullptr;
    const gert::StorageShape* pw = context->GetOptionalInputShape(kPosWeight);
    if (pw != nullptr) {
        const int64_t pwSize = pw->GetStorageShape().GetShapeSize();
        const int64_t last = shape.GetDimNum() ? shape.GetDim(shape.GetDimNum() - 1) : 1;
        if (pwSize == n) {
            v.posWeight = bce_grad::PosWeight::Full;
        } else if (pw->GetStorageShape().GetDimNum() == 1 && pwSize == last) {
            v.posWeight = bce_grad::PosWeight::LastDim;
            v.classes = last;
        } else {
            return ge::GRAPH_FAILED;  // neither the input's shape nor [C]
        }
    }

    std::string soc = "Ascend910B2";
    auto* info = context->GetPlatformInfo();
    if (info != nullptr) {
        std::string version;
        if (info->GetPlatformRes("version", "SoC_version", version) && !version.empty()) soc = version;
    }

    bce_grad::TilingResult r;
    const char* err = nullptr;
    if (bce_grad::TunedTiling(soc.c_str(), n, v, platform, &r, &err) != bce_grad::Status::Ok) {
        return ge::GRAPH_FAILED;
    }
    BceGradTilingData* tiling = context->GetTilingData<BceGradTilingData>();
    *tiling = r.data;
    context->SetBlockDim(static_cast<uint32_t>(r.blockDim > 0 ? r.blockDim : 1));
    context->SetTilingKey(static_cast<uint64_t>(r.tilingKey));
    size_t* workspaces = context->GetWorkspaceSizes(1);
    workspaces[0] = ascendc.GetLibApiWorkSpaceSize() + static_cast<size_t>(bce_grad::WorkspaceBytes(v, r));
    return ge::GRAPH_SUCCESS;
}

}  // namespace optiling

namespace ge {

static graphStatus InferShape(gert::InferShapeContext* context) {
    const gert::Shape* logits = context->GetInputShape(1);
    gert::Shape* z = context->GetOutputShape(0);
    *z = *logits;
    return GRAPH_SUCCESS;
}

static graphStatus InferDataType(gert::InferDataTypeContext* context) {
    context->SetOutputDataType(0, context->GetInputDataType(1));
    return GRAPH_SUCCESS;
}

}  // namespace ge

namespace ops {

class BceGrad : public OpDef {
public:
    explicit BceGrad(const char* name) : OpDef(name) {
        const std::vector<ge::DataType> types = {ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_INT32, ge::DT_INT16};
        const std::vector<ge::Format> formats(types.size(), ge::FORMAT_ND);
        for (const char* in : {"grad", "logits", "labels"}) {
            this->Input(in).ParamType(REQUIRED).DataType(types).Format(formats).UnknownShapeFormat(formats);
        }
        for (const char* in : {"weight", "pos_weight"}) {
            this->Input(in).ParamType(OPTIONAL).DataType(types).Format(formats).UnknownShapeFormat(formats);
        }
        this->Output("z").ParamType(REQUIRED).DataType(types).Format(formats).UnknownShapeFormat(formats);
        this->Attr("reduction").AttrType(OPTIONAL).String("mean");
        this->Attr("wrt").AttrType(OPTIONAL).String("logit");
        this->SetInferShape(ge::InferShape).SetInferDataType(ge::InferDataType);
        this->AICore().SetTiling(optiling::TilingFunc);
        for (const char* soc : {"ascend910b", "ascend310b"}) this->AICore().AddConfig(soc);
    }
};

OP_ADD(BceGrad);

}  // namespace ops
