/**
 * The BceWithLogitsFused TilingFunc (ops-nn layout: op_host/<op>_tiling.cpp): the BceGrad kernel's fused mode,
 * tiled by the same host tiling and tuned table (its fused-mode entries: the variant key's mode) as
 * `POST /tiling` answers {"mode": "fused"}. It reads the call (bce_grad_tiling_context.h, shared with BceGrad's
 * TilingFunc) and writes the struct; the launch must fit the loss's kLossParts slots.
 *
 * Compile-checked against the real CANN 8.5.0 headers (tests/kernel/test_cann_compile.py) as the tiling
 * library and as the proto library; built by kernel/build.sh with CANN; it has not run on a device.
 */
#include "bce_grad_tiling_context.h"

namespace optiling {

namespace {

enum InputIndex { kLogits = 0, kLabels = 1, kWeight = 2, kPosWeight = 3 };
enum AttrIndex { kReductionAttr = 0 };

/** The call's variant: a float dtype, labels of the logits' size, the weights' forms; false otherwise. */
bool ReadVariant(gert::TilingContext* context, const gert::Shape& shape, bce_grad::Variant* v) {
    const auto* logitsDesc = context->GetInputDesc(kLogits);
    const gert::RuntimeAttrs* attrs = context->GetAttrs();
    if (logitsDesc == nullptr || attrs == nullptr || !bce_grad_host::ToDtype(logitsDesc->GetDataType(), &v->dtype) ||
        !bce_grad_host::ToReduction(attrs->GetAttrPointer<char>(kReductionAttr), &v->reduction)) {
        return false;
    }
    if (v->dtype == bce_grad::Dtype::Int32 || v->dtype == bce_grad::Dtype::Int16) return false;
    if (bce_grad_host::ElementsOf(context, kLabels) != shape.GetShapeSize()) return false;
    v->wrt = bce_grad::Wrt::Logit;
    v->mode = bce_grad::Mode::Fused;
    return bce_grad_host::ReadForms(context, kWeight, kPosWeight, shape, v);
}

ge::graphStatus TilingBceWithLogitsFused(gert::TilingContext* context) {
    const gert::StorageShape* logitsShape = context->GetInputShape(kLogits);
    if (logitsShape == nullptr) return ge::GRAPH_FAILED;
    const gert::Shape& shape = logitsShape->GetStorageShape();
    bce_grad::Variant v;
    if (!ReadVariant(context, shape, &v)) return ge::GRAPH_FAILED;
    return bce_grad_host::WriteTunedTiling(context, shape, v, bce_grad_host::kLossParts);
}

}  // namespace

IMPL_OP_OPTILING(BceWithLogitsFused).Tiling(TilingBceWithLogitsFused);

}  // namespace optiling
