/**
 * Shape and dtype inference of BceGrad (ops-nn layout: op_host/<op>_infershape.cpp): z has the
 * logits' shape and dtype. Registered by op type; compile-checked against the real CANN 8.5.0 headers.
 */
#include "register/op_impl_registry.h"

namespace ops {

namespace {

constexpr size_t kLogits = 1;
constexpr size_t kZ = 0;

ge::graphStatus InferShapeBceGrad(gert::InferShapeContext* context) {
    const gert::Shape* logits = context->GetInputShape(kLogits);
    gert::Shape* z = context->GetOutputShape(kZ);
    if (logits == nullptr || z == nullptr) return ge::GRAPH_FAILED;
    *z = *logits;
    return ge::GRAPH_SUCCESS;
}

ge::graphStatus InferDataTypeBceGrad(gert::InferDataTypeContext* context) {
    return context->SetOutputDataType(kZ, context->GetInputDataType(kLogits));
}

}  // namespace

IMPL_OP_INFERSHAPE(BceGrad).InferShape(InferShapeBceGrad).InferDataType(InferDataTypeBceGrad);

}  // namespace ops
