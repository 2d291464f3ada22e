/**
 * Shape and dtype inference of BceWithLogitsFused (ops-nn layout: op_host/<op>_infershape.cpp): dx has the
 * logits' shape and dtype; the loss too for reduction none, else bce_grad_host::kLossParts float32 slots
 * (one per core: the caller adds them in order). Registered by op type; compile-checked against the real
 * CANN 8.5.0 headers.
 */
#include <cstring>

#include "bce_with_logits_fused_parts.h"
#include "register/op_impl_registry.h"

namespace ops {

namespace {

constexpr size_t kLogits = 0;
constexpr size_t kDx = 0;
constexpr size_t kLoss = 1;
constexpr size_t kReductionAttr = 0;

bool ReductionIsNone(const gert::RuntimeAttrs* attrs) {
    const char* r = attrs == nullptr ? nullptr : attrs->GetAttrPointer<char>(kReductionAttr);
    return r != nullptr && std::strcmp(r, "none") == 0;
}

ge::graphStatus InferShapeBceWithLogitsFused(gert::InferShapeContext* context) {
    const gert::Shape* logits = context->GetInputShape(kLogits);
    gert::Shape* dx = context->GetOutputShape(kDx);
    gert::Shape* loss = context->GetOutputShape(kLoss);
    if (logits == nullptr || dx == nullptr || loss == nullptr) return ge::GRAPH_FAILED;
    *dx = *logits;
    if (ReductionIsNone(context->GetAttrs())) {
        *loss = *logits;
    } else {
        loss->SetDimNum(1);
        loss->SetDim(0, bce_grad_host::kLossParts);
    }
    return ge::GRAPH_SUCCESS;
}

ge::graphStatus InferDataTypeBceWithLogitsFused(gert::InferDataTypeContext* context) {
    const ge::DataType dt = context->GetInputDataType(kLogits);
    if (context->SetOutputDataType(kDx, dt) != ge::GRAPH_SUCCESS) return ge::GRAPH_FAILED;
    return context->SetOutputDataType(kLoss, ReductionIsNone(context->GetAttrs()) ? dt : ge::DT_FLOAT);
}

}  // namespace

IMPL_OP_INFERSHAPE(BceWithLogitsFused)
    .InferShape(InferShapeBceWithLogitsFused)
    .InferDataType(InferDataTypeBceWithLogitsFused);

}  // namespace ops
