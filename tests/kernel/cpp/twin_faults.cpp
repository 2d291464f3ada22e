// Small, deliberately wrong kernels: each provokes one fault the CPU twin must report.
// Built by tests/kernel/test_twin_faults.py against kernel/cpu/kernel_operator.h.
#include <cstring>
#include <map>
#include <string>

#include "kernel_operator.h"

using namespace AscendC;

namespace {

float* gX = new float[100]();  // registered as 'x' (100 floats; on the heap so g++ cannot see the faults)
float* gY = new float[256]();  // registered as 'y' (256 floats)

void Clean() {  // a correct copy kernel: must not fault
    TPipe pipe;
    TQue<TPosition::VECIN, 1> in;
    TQue<TPosition::VECOUT, 1> out;
    pipe.InitBuffer(in, 2, 1024);
    pipe.InitBuffer(out, 2, 1024);
    GlobalTensor<float> x, y;
    x.SetGlobalBuffer(gX, 100);
    y.SetGlobalBuffer(gY, 256);
    LocalTensor<float> a = in.AllocTensor<float>();
    DataCopyExtParams p{1, 100 * sizeof(float), 0, 0, 0};
    DataCopyPad(a, x, p, DataCopyPadExtParams<float>{false, 0, 0, 0.0f});
    in.EnQue(a);
    LocalTensor<float> b = in.DeQue<float>();
    LocalTensor<float> c = out.AllocTensor<float>();
    Muls(c, b, 2.0f, 100);
    out.EnQue(c);
    in.FreeTensor(b);
    LocalTensor<float> d = out.DeQue<float>();
    DataCopyPad(y, d, p);
    out.FreeTensor(d);
}

void UbOverflow() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 100000);  // 200000 B > 188160 B usable
}

void QueueLimit() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q[5];
    for (auto& e : q) pipe.InitBuffer(e, 2, 256);  // 10 VECIN buffers > 8
}

void DataCopyNot32() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(gX, 100);
    LocalTensor<float> a = q.AllocTensor<float>();
    DataCopy(a, x, 7);  // 28 B
    q.FreeTensor(a);
}

void UbUnaligned() {
    TPipe pipe;
    TBuf<TPosition::VECCALC> t;
    pipe.InitBuffer(t, 1024);
    LocalTensor<float> a = t.Get<float>();
    Adds(a[3], a[3], 1.0f, 8);  // starts 12 B into the buffer
}

void GmReadOutOfBounds() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(gX + 64, 64);
    LocalTensor<float> a = q.AllocTensor<float>();
    DataCopy(a, x, 64);  // elements [64, 128) of a 100-element tensor
    q.FreeTensor(a);
}

void GmWriteOutOfBounds() {
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 1, 1024);
    GlobalTensor<float> x;
    x.SetGlobalBuffer(gX + 96, 8);
    LocalTensor<float> a = q.AllocTensor<float>();
    DataCopy(x, a, 8);  // elements [96, 104)
    q.FreeTensor(a);
}

void DequeEmpty() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.DeQue<float>();
    q.FreeTensor(a);
}

void EnqueFull() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    LocalTensor<float> b = q.AllocTensor<float>();
    q.EnQue(a);
    q.EnQue(b);  // depth 1
}

void DoubleFree() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    q.FreeTensor(a);
    q.FreeTensor(a);
}

void Leak() {
    TPipe pipe;
    TQue<TPosition::VECOUT, 1> q;
    pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    Duplicate(a, 0.0f, 64);
}

void CastUnsupported() {
    TPipe pipe;
    TBuf<TPosition::VECCALC> f, b;
    pipe.InitBuffer(f, 256);
    pipe.InitBuffer(b, 256);
    LocalTensor<float> src = f.Get<float>();
    LocalTensor<bfloat16_t> dst = b.Get<bfloat16_t>();
    Cast(dst, src, RoundMode::CAST_NONE, 64);  // float -> bf16 has no CAST_NONE on A2
}

void AllocNoFreeBuffer() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 1, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    LocalTensor<float> b = q.AllocTensor<float>();  // the only buffer is taken: the NPU waits forever
    q.FreeTensor(a);
    q.FreeTensor(b);
}

void PartialOverlap() {
    TPipe pipe;
    TBuf<TPosition::VECCALC> t;
    pipe.InitBuffer(t, 1024);
    LocalTensor<float> a = t.Get<float>();
    Add(a[8], a, a, 64);  // dst starts 32 B into src
}

void EventPairing() {
    TPipe pipe;
    WaitFlag<HardEvent::MTE2_V>(0);
}

void StaleTensor() {
    TPipe pipe;
    TQue<TPosition::VECIN, 1> q;
    pipe.InitBuffer(q, 2, 256);
    LocalTensor<float> a = q.AllocTensor<float>();
    q.FreeTensor(a);
    Duplicate(a, 1.0f, 8);  // use after free
}

const std::map<std::string, void (*)()> kCases = {
    {"clean", Clean},
    {"ub_overflow", UbOverflow},
    {"queue_limit", QueueLimit},
    {"datacopy_not_32B", DataCopyNot32},
    {"ub_unaligned", UbUnaligned},
    {"gm_out_of_bounds_read", GmReadOutOfBounds},
    {"gm_out_of_bounds_write", GmWriteOutOfBounds},
    {"deque_empty", DequeEmpty},
    {"enque_full", EnqueFull},
    {"double_free", DoubleFree},
    {"leak", Leak},
    {"cast_unsupported", CastUnsupported},
    {"alloc_no_free_buffer", AllocNoFreeBuffer},
    {"partial_overlap", PartialOverlap},
    {"event_pairing", EventPairing},
    {"stale_tensor", StaleTensor},
};

}  // namespace

extern "C" int run_fault_case(const char* name, char* err, unsigned long errLen) {
    auto it = kCases.find(name);
    if (it == kCases.end()) {
        std::snprintf(err, errLen, "unknown case %s", name);
        return 2;
    }
    twin::GmRegion x, y;
    x.name = "x";
    x.base = reinterpret_cast<uint8_t*>(gX);
    x.bytes = 100 * sizeof(float);
    y.name = "y";
    y.base = reinterpret_cast<uint8_t*>(gY);
    y.bytes = 256 * sizeof(float);
    twin::Launch launch;
    launch.blockDim = 2;
    launch.ubCapacity = 196608 - 8448;
    launch.regions = {&x, &y};
    auto reports = twin::RunCores(launch, {}, 1, it->second);
    for (const auto& r : reports) {
        if (!r.fault.empty()) {
            std::snprintf(err, errLen, "[%s] %s", r.kind.c_str(), r.fault.c_str());
            return 1;
        }
    }
    return 0;
}
