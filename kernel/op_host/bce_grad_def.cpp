/**
 * The BceGrad operator's definition (ops-nn layout: op_host/<op>_def.cpp): inputs, output, attributes
 * and the SoCs it builds for. Its tiling is registered in bce_grad_tiling.cpp, its shape and dtype
 * inference in bce_grad_infershape.cpp (IMPL_OP_OPTILING / IMPL_OP_INFERSHAPE, by op type).
 *
 * Compile-checked against the real CANN 8.5.0 headers as the tiling and the proto library
 * (tests/kernel/test_cann_compile.py); built into the op package by kernel/build.sh; not run on a device here.
 */
#include <vector>

#include "register/op_def_registry.h"

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
        // Atlas 800T/800I A2 (ascend910b) and Atlas 200I/500 A2 (ascend310b); kernel/build.sh builds both
        for (const char* soc : {"ascend910b", "ascend310b"}) this->AICore().AddConfig(soc);
    }
};

OP_ADD(BceGrad);

}  // namespace ops
