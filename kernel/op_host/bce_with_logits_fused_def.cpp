/**
 * The BceWithLogitsFused operator's definition (ops-nn layout: op_host/<op>_def.cpp): BCEWithLogits' loss and
 * its gradient in one pass of the BceGrad kernel's fused mode (op_kernel/bce_with_logits_fused.cpp; the same
 * tiling struct and host tiling). Inputs logits and labels, optional weight (any shape broadcastable to the
 * logits) and pos_weight (the logits' shape or [C]); outputs dx (the gradient at grad_output 1; 1/N in it
 * for mean: a caller with another grad_output multiplies) and loss: for reduction none the logits' shape and
 * dtype; for sum and mean bce_grad_host::kLossParts float32 slots, one per core, zeroed before the launch
 * (InitValue) so the loss is the slots added in order (divided by N for mean: a run repeats bit for bit).
 *
 * Its tiling is registered in bce_with_logits_fused_tiling.cpp, its inference in
 * bce_with_logits_fused_infershape.cpp. Compile-checked against the real CANN 8.5.0 headers as the tiling and
 * the proto library (tests/kernel/test_cann_compile.py); built into the op package by kernel/build.sh; not run
 * on a device here.
 */
#include <vector>

#include "register/op_def_registry.h"

namespace ops {

class BceWithLogitsFused : public OpDef {
public:
    explicit BceWithLogitsFused(const char* name) : OpDef(name) {
        // one row per binary: the float dtypes computed in float32; the loss of sum / mean is float32 slots
        const std::vector<ge::DataType> types = {ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT16, ge::DT_BF16};
        const std::vector<ge::DataType> lossTypes = {ge::DT_FLOAT, ge::DT_FLOAT16, ge::DT_BF16, ge::DT_FLOAT,
                                                     ge::DT_FLOAT};
        const std::vector<ge::Format> formats(types.size(), ge::FORMAT_ND);
        for (const char* in : {"logits", "labels"}) {
            this->Input(in).ParamType(REQUIRED).DataType(types).Format(formats).UnknownShapeFormat(formats);
        }
        for (const char* in : {"weight", "pos_weight"}) {
            this->Input(in).ParamType(OPTIONAL).DataType(types).Format(formats).UnknownShapeFormat(formats);
        }
        this->Output("dx").ParamType(REQUIRED).DataType(types).Format(formats).UnknownShapeFormat(formats);
        this->Output("loss")
            .ParamType(REQUIRED)
            .DataType(lossTypes)
            .Format(formats)
            .UnknownShapeFormat(formats)
            .InitValue(0);  // sum / mean: the slots of cores past the launch's block dim read 0
        this->Attr("reduction").AttrType(OPTIONAL).String("mean");
        for (const char* soc : {"ascend910b", "ascend310b"}) this->AICore().AddConfig(soc);
    }
};

OP_ADD(BceWithLogitsFused);

}  // namespace ops
