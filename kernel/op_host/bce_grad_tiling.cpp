/**
 * The BceGrad TilingFunc (ops-nn layout: op_host/<op>_tiling.cpp). The tiling arithmetic, the UB
 * budget from what the platform reports and the pos_weight form are bce_grad_tiling_core.h; the
 * knobs are the service's (bce_grad_tuned_tiling.h: the tuned table, re-fit by the cost model at
 * unseen sizes). All three are pure C++ and tested against tiling_model; this file only reads the
 * call (bce_grad_tiling_context.h, shared with BceWithLogitsFused's TilingFunc) and writes the struct.
 *
 * Built by kernel/build.sh inside an msopgen project with CANN (ASCEND_HOME_PATH set). Without
 * CANN it is compile-checked against the real CANN 8.5.0 headers (tests/kernel/test_cann_compile.py) as the
 * tiling library and as the proto library; it has not run on a device.
 */
#include "bce_grad_tiling_context.h"

namespace optiling {

namespace {

enum InputIndex { kGrad = 0, kLogits = 1, kLabels = 2, kWeight = 3, kPosWeight = 4 };
enum AttrIndex { kReductionAttr = 0, kWrtAttr = 1 };

/** The call's variant from its inputs and attributes; false for anything the kernel cannot run. */
bool ReadVariant(gert::TilingContext* context, const gert::Shape& shape, bce_grad::Variant* v) {
    const auto* logitsDesc = context->GetInputDesc(kLogits);
    const gert::RuntimeAttrs* attrs = context->GetAttrs();
    if (logitsDesc == nullptr || attrs == nullptr || !bce_grad_host::ToDtype(logitsDesc->GetDataType(), &v->dtype) ||
        !bce_grad_host::ToReduction(attrs->GetAttrPointer<char>(kReductionAttr), &v->reduction) ||
        !bce_grad_host::ToWrt(attrs->GetAttrPointer<char>(kWrtAttr), &v->wrt)) {
        return false;
    }
    const int64_t n = shape.GetShapeSize();
    if (bce_grad_host::ElementsOf(context, kGrad) != (v->reduction == bce_grad::Reduction::None ? n : 1)) {
        return false;  // none: grad has the input's shape; sum/mean: one scalar
    }
    return bce_grad_host::ReadForms(context, kWeight, kPosWeight, shape, v);
}

ge::graphStatus TilingBceGrad(gert::TilingContext* context) {
    const gert::StorageShape* logitsShape = context->GetInputShape(kLogits);
    if (logitsShape == nullptr) return ge::GRAPH_FAILED;
    const gert::Shape& shape = logitsShape->GetStorageShape();
    bce_grad::Variant v;
    if (!ReadVariant(context, shape, &v)) return ge::GRAPH_FAILED;
    return bce_grad_host::WriteTunedTiling(context, shape, v);
}

}  // namespace

IMPL_OP_OPTILING(BceGrad).Tiling(TilingBceGrad);

}  // namespace optiling
