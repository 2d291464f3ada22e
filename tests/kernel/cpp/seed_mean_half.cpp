// The requirement's Compute step for reduction=mean in half precision, as its kernel does it:
//   logits = logits - labels; logits = logits * (grad / N); z = logits * weight
// with the scale grad/N kept as a half scalar. Built against the CPU twin by
// tests/kernel/test_kernel_golden.py (test_mean_scale_does_not_underflow_for_float16) and run over one
// tile, so the seed's arithmetic itself runs, not a numpy imitation of it.
#include "kernel_operator.h"

using namespace AscendC;

namespace {
constexpr uint32_t kTile = 256;
}

extern "C" int seed_mean_half(const uint16_t* p, const uint16_t* y, const uint16_t* w, uint16_t grad, double n,
                              uint16_t* z, char* err, unsigned long errLen) {
    twin::GmRegion regions[4];
    const char* names[] = {"logits", "labels", "weight", "z"};
    const uint16_t* data[] = {p, y, w, z};
    twin::Launch launch;
    launch.blockDim = 1;
    launch.ubCapacity = 196608 - 8448;
    for (int i = 0; i < 4; ++i) {
        regions[i].name = names[i];
        regions[i].base = reinterpret_cast<uint8_t*>(const_cast<uint16_t*>(data[i]));
        regions[i].bytes = kTile * sizeof(uint16_t);
        launch.regions.push_back(&regions[i]);
    }
    auto reports = twin::RunCores(launch, {}, 1, [&]() {
        TPipe pipe;
        TBuf<TPosition::VECCALC> bp, by, bw, bz;
        pipe.InitBuffer(bp, kTile * sizeof(half));
        pipe.InitBuffer(by, kTile * sizeof(half));
        pipe.InitBuffer(bw, kTile * sizeof(half));
        pipe.InitBuffer(bz, kTile * sizeof(half));
        GlobalTensor<half> gp, gy, gw, gz;
        gp.SetGlobalBuffer((half*)p, kTile);
        gy.SetGlobalBuffer((half*)y, kTile);
        gw.SetGlobalBuffer((half*)w, kTile);
        gz.SetGlobalBuffer((half*)z, kTile);
        LocalTensor<half> lp = bp.Get<half>(), ly = by.Get<half>(), lw = bw.Get<half>(), lz = bz.Get<half>();
        DataCopy(lp, gp, kTile);
        DataCopy(ly, gy, kTile);
        DataCopy(lw, gw, kTile);
        const half g = half::FromBits(grad);
        const half scale(static_cast<float>(static_cast<float>(g) / n));  // the seed's half grad/N
        Sub(lp, lp, ly, kTile);
        Muls(lp, lp, scale, kTile);
        Mul(lz, lp, lw, kTile);
        DataCopy(gz, lz, kTile);
    });
    if (!reports[0].fault.empty()) {
        std::snprintf(err, errLen, "[%s] %s", reports[0].kind.c_str(), reports[0].fault.c_str());
        return 1;
    }
    return 0;
}
