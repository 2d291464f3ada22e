/**
 * Host tiling of BinaryCrossEntropyGrad as pure C++17 (no CANN headers): the same arithmetic as
 * tiling_model (Python), field for field, for the "seed" scheme (the requirement's tiling, flaws
 * included) and the "exact" scheme (every element on exactly one core and tile). The CANN
 * TilingFunc wraps this with the platform's UB size and vector core count; tests compile it with
 * g++ and compare it with tiling_model on thousands of cases.
 */
#ifndef BCE_GRAD_TILING_CORE_H
#define BCE_GRAD_TILING_CORE_H

#include <cstdint>
#include <cstring>

#include "../op_kernel/bce_grad_tiling_data.h"

namespace bce_grad {

enum class Dtype : int64_t { Float32 = 0, Float16 = 1, BFloat16 = 2, Int32 = 3, Int16 = 4 };
enum class Reduction : int64_t { None = 0, Sum = 1, Mean = 2 };
enum class PosWeight : int64_t { None = 0, Full = 1, LastDim = 2 };
enum class Wrt : int64_t { Logit = 0, Probability = 1 };
enum class Scheme { Seed, Exact };
enum class Status { Ok, BadParam, Unsupported };

struct Platform {
    int64_t ubBytes;         // UB the seed scheme's formula divides (the requirement's ubSize)
    int64_t ubReserveBytes;  // what the kernel must leave free below ubBytes
    int64_t aivCores;        // GetCoreNumAiv()
};

/** The platform families whose UB reserve differs (PlatformAscendC::GetSocVersion). */
enum class SocFamily { Ascend910B, Ascend310B, Other };

constexpr int64_t kFrameworkUbReserve = 256;  // AscendC's own UB (ASC_UB_SIZE = 192 KiB - 256 B on 910B)
constexpr int64_t kTmpUbReserve = 8192;       // TMP_UB on dav-c220: Select/Compare temporaries (910B only)

/**
 * The Platform of a SoC from what CANN reports. GetCoreMemSize(UB) already leaves out the 256-B
 * framework reserve on Ascend910B (and only there: asc-devkit platform_ascendc.cpp), so the host
 * keeps 8 KiB more on 910B and the 256 B on 310B: the usable UB is the same number tiling_model's
 * SoC profiles give (ub_bytes - ub_reserve_bytes), e.g. 188160 B on 910B, 253696 B on 310B.
 */
inline Platform PlatformFromReported(SocFamily family, int64_t reportedUb, int64_t aivCores) {
    Platform p;
    p.ubBytes = family == SocFamily::Ascend910B ? reportedUb + kFrameworkUbReserve : reportedUb;
    p.ubReserveBytes = family == SocFamily::Ascend910B ? kFrameworkUbReserve + kTmpUbReserve : kFrameworkUbReserve;
    p.aivCores = aivCores;
    return p;
}

/**
 * The framework's tiling key (SetTilingKey): always 0. The kernel has no TILING_KEY_IS branches:
 * it is one binary per dtype that decodes the variant key (TilingKey below) from the struct at run
 * time, so every key the host computes has a kernel to run.
 */
constexpr uint64_t kFrameworkTilingKey = 0;

struct Variant {
    Dtype dtype = Dtype::Float32;
    Reduction reduction = Reduction::None;
    bool weight = true;
    PosWeight posWeight = PosWeight::None;
    Wrt wrt = Wrt::Logit;
    int64_t classes = 0;  // C of a last-dim pos_weight
};

struct Knobs {  // 0 means "the scheme's default"
    int64_t blockBytes = 0;
    int64_t bufferNum = 0;
    int64_t tileBytes = 0;
    int64_t coreNum = 0;
};

struct TilingResult {
    BceGradTilingData data;
    int64_t blockDim;
    int64_t tilingKey;
    Knobs knobs;  // resolved
};

constexpr int64_t kSeedBlockBytes = 512;
constexpr int64_t kSeedBufferNum = 2;
constexpr int64_t kSeedUbDataNumber = 5;
constexpr int64_t kSeedScalarQueueElems = 16;
constexpr uint64_t kU32 = 0xFFFFFFFFull;
constexpr int64_t kMaxBuffersPerPosition = 8;  // TQue buffers per TPosition on A2/310B
constexpr int64_t kLastDimStageElems = 768;  // staging buffer of the pos_weight row copy
constexpr int64_t kLastDimSuperElems = 256;  // rows shorter than this are replicated in UB first

inline int64_t DtypeBytes(Dtype d) { return (d == Dtype::Float32 || d == Dtype::Int32) ? 4 : 2; }
inline bool IsFloat(Dtype d) { return d == Dtype::Float32 || d == Dtype::Float16 || d == Dtype::BFloat16; }
inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/** The kernel's UB plan for a variant (mirrors tiling_model.kernels.bce_grad_kernel). */
struct BufferPlan {
    int64_t fullInputs;
    int64_t outputs;
    int64_t elemBytes;
    int64_t tempBytesPerElem;
    int64_t scalarQueueBytes;
    int64_t rowBytes;
    int64_t tempBuffers;  // TBufs the temporaries are split into (each rounded up to 32 B)

    int64_t Streams() const { return fullInputs + outputs; }
    int64_t FixedUb(int64_t bufferNum) const {
        int64_t scalar = scalarQueueBytes ? bufferNum * RoundUp(scalarQueueBytes, 32) : 0;
        return scalar + RoundUp(rowBytes, 32);
    }
    int64_t UbBytes(int64_t tileBytes, int64_t bufferNum) const {
        int64_t queues = Streams() * bufferNum * RoundUp(tileBytes, 32);
        int64_t elems = tileBytes / elemBytes;
        int64_t temps = tempBuffers ? tempBuffers * RoundUp(tempBytesPerElem / tempBuffers * elems, 32)
                                    : RoundUp(tempBytesPerElem * elems, 32);
        return queues + temps + FixedUb(bufferNum);
    }
    int64_t MaxTileBytes(int64_t budget, int64_t bufferNum) const {
        double perByte = static_cast<double>(Streams() * bufferNum) +
                         static_cast<double>(tempBytesPerElem) / static_cast<double>(elemBytes);
        int64_t tile = static_cast<int64_t>(static_cast<double>(budget - FixedUb(bufferNum)) / perByte) / 32 * 32;
        while (tile > 0 && UbBytes(tile, bufferNum) > budget) {
            tile -= 32;
        }
        return tile > 0 ? tile : 0;
    }
};

inline Status MakePlan(const Variant& v, Scheme scheme, BufferPlan* plan, const char** err) {
    int64_t elem = DtypeBytes(v.dtype);
    if (!IsFloat(v.dtype) && v.reduction != Reduction::None) {
        *err = "int dtypes support reduction none only";
        return Status::Unsupported;
    }
    if (scheme == Scheme::Seed) {
        if (!v.weight || v.posWeight != PosWeight::None || v.wrt != Wrt::Logit) {
            *err = "the seed scheme is the requirement's kernel: weight always read, no pos_weight, wrt=logit";
            return Status::Unsupported;
        }
        bool none = v.reduction == Reduction::None;
        *plan = {none ? 4 : 3, 1, elem, 0, none ? 0 : kSeedScalarQueueElems * elem, 0, 0};
        return Status::Ok;
    }
    if (v.posWeight != PosWeight::None && v.wrt == Wrt::Probability) {
        *err = "pos_weight applies to wrt='logit' only";
        return Status::Unsupported;
    }
    if (v.wrt == Wrt::Probability && !IsFloat(v.dtype)) {
        *err = "wrt='probability' needs a float dtype (A2 has no integer Div)";
        return Status::Unsupported;
    }
    bool widen = IsFloat(v.dtype) && elem == 2;
    int64_t work = widen ? 4 : elem;
    int64_t inputs = (v.reduction == Reduction::None ? 1 : 0) + 2 + (v.weight ? 1 : 0) +
                     (v.posWeight != PosWeight::None ? 1 : 0);
    int64_t temps = widen ? 2 : 0;  // A = float(p), B = float(y)
    if (v.posWeight != PosWeight::None) {
        temps += widen ? 1 : 0;  // C = float(pw); native types compute in the pw tile
    } else if (v.wrt == Wrt::Probability) {
        temps += 1;  // C = max(p*(1-p), 1e-12)
    }
    int64_t row = v.posWeight == PosWeight::LastDim ? kLastDimStageElems * elem : 0;
    *plan = {inputs, 1, elem, temps * work, 0, row, temps};
    return Status::Ok;
}

/**
 * The pos_weight form from the shapes of a call, as kernel.cpu and torch read them: absent; the
 * input's own shape (full); or [C] with C the input's last dim (last_dim). Anything else is refused.
 */
inline Status PosWeightFromShape(bool present, bool sameShape, int64_t pwDims, int64_t pwElems, int64_t inputDims,
                                 int64_t lastDim, Variant* v, const char** err) {
    v->posWeight = PosWeight::None;
    v->classes = 0;
    if (!present) return Status::Ok;
    if (sameShape) {
        v->posWeight = PosWeight::Full;
        return Status::Ok;
    }
    if (pwDims == 1 && inputDims >= 1 && lastDim >= 1 && pwElems == lastDim) {
        v->posWeight = PosWeight::LastDim;
        v->classes = lastDim;
        return Status::Ok;
    }
    *err = "pos_weight must have the input's shape or be [C] with C the input's last dim";
    return Status::BadParam;
}

/** GM workspace of a last-dim pos_weight: each core's periodic row pw[k % C], k < tile + 2C + 256. */
inline int64_t LastDimWorkspaceElems(int64_t tileElems, int64_t classes) {
    return tileElems + 2 * classes + kLastDimSuperElems;
}

inline int64_t WorkspaceBytes(const Variant& v, const TilingResult& r) {
    if (v.posWeight != PosWeight::LastDim || r.blockDim == 0) return 0;
    int64_t perCore = RoundUp(LastDimWorkspaceElems(r.data.tileDataNum, v.classes) * DtypeBytes(v.dtype), 32);
    return perCore * r.blockDim;
}

inline int64_t TilingKey(const Variant& v, int64_t bufferNum) {
    int64_t schMode = v.reduction == Reduction::None ? 0 : 1;
    return schMode + 10 * static_cast<int64_t>(v.dtype) + 100 * (v.weight ? 1 : 0) + 1000 * bufferNum +
           10000 * static_cast<int64_t>(v.posWeight) + 100000 * static_cast<int64_t>(v.wrt);
}

inline int64_t ScaleBits(Reduction r, int64_t n) {
    float scale = r != Reduction::Mean ? 1.0f : (n ? static_cast<float>(1.0 / static_cast<double>(n)) : 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &scale, sizeof bits);
    return static_cast<int64_t>(bits);
}

inline void Tiles(int64_t count, int64_t tileElems, int64_t* num, int64_t* tail) {
    if (count <= 0) {
        *num = 0;
        *tail = 0;
        return;
    }
    *num = (count + tileElems - 1) / tileElems;
    *tail = count - (*num - 1) * tileElems;
}

inline Status ResolveKnobs(const Knobs& in, const BufferPlan& plan, const Platform& p, Scheme scheme, Knobs* out,
                           const char** err) {
    if (in.blockBytes < 0 || in.bufferNum < 0 || in.tileBytes < 0 || in.coreNum < 0) {
        *err = "knobs must be positive";
        return Status::BadParam;
    }
    int64_t elem = plan.elemBytes;
    Knobs k;
    k.blockBytes = in.blockBytes ? in.blockBytes : kSeedBlockBytes;
    k.bufferNum = in.bufferNum ? in.bufferNum : kSeedBufferNum;
    if (!in.bufferNum && scheme == Scheme::Exact) {
        // double buffering unless the queue limit forbids it (five VECIN queues allow one buffer)
        int64_t queues = plan.fullInputs + (plan.scalarQueueBytes ? 1 : 0);
        queues = queues > plan.outputs ? queues : plan.outputs;
        while (k.bufferNum > 1 && queues * k.bufferNum > kMaxBuffersPerPosition) --k.bufferNum;
    }
    if (k.blockBytes % 32) {
        *err = "block_bytes is not a multiple of 32";
        return Status::BadParam;
    }
    if (in.tileBytes) {
        k.tileBytes = in.tileBytes;
    } else if (scheme == Scheme::Seed) {
        int64_t blocks = p.ubBytes / k.blockBytes / k.bufferNum / kSeedUbDataNumber;
        k.tileBytes = (blocks > 1 ? blocks : 1) * k.blockBytes;
    } else {
        int64_t fit = plan.MaxTileBytes(p.ubBytes - p.ubReserveBytes, k.bufferNum);
        k.tileBytes = fit >= k.blockBytes ? fit / k.blockBytes * k.blockBytes : (fit > 32 ? fit : 32);
    }
    if (k.tileBytes % elem) {
        *err = "tile_bytes is not a multiple of the dtype size";
        return Status::BadParam;
    }
    if (scheme == Scheme::Seed && k.tileBytes % k.blockBytes) {
        *err = "the seed scheme tiles in whole blocks";
        return Status::BadParam;
    }
    k.coreNum = in.coreNum ? in.coreNum : p.aivCores;
    *out = k;
    return Status::Ok;
}

/** Exact scheme: the last core is cut to end at element n-1. */
inline void ExactFields(int64_t n, int64_t elem, const Knobs& k, const Variant& v, TilingResult* r) {
    BceGradTilingData& f = r->data;
    int64_t tileElems = k.tileBytes / elem;
    std::memset(&f, 0, sizeof f);
    f.tileDataNum = tileElems;
    f.reduction = static_cast<int64_t>(v.reduction);
    f.scaleBits = ScaleBits(v.reduction, n);
    f.posWeightClasses = v.posWeight == PosWeight::LastDim ? v.classes : 0;
    r->blockDim = 0;
    if (n == 0) {
        return;
    }
    int64_t blockElems = k.blockBytes / elem;
    int64_t blocks = (n + blockElems - 1) / blockElems;
    int64_t cores = k.coreNum < blocks ? k.coreNum : blocks;
    int64_t every = blocks / cores;
    int64_t tailBlocks = blocks % cores;
    int64_t small = every * blockElems;
    int64_t big = (every + 1) * blockElems;
    f.totalLength = n;
    f.smallCoreDataNum = small;
    f.bigCoreDataNum = big;
    Tiles(small, tileElems, &f.finalSmallTileNum, &f.smallTailDataNum);
    Tiles(big, tileElems, &f.finalBigTileNum, &f.bigTailDataNum);
    f.tailBlockNum = tailBlocks;
    f.lastCoreDataNum = n - (big * tailBlocks + small * (cores - 1 - tailBlocks));
    Tiles(f.lastCoreDataNum, tileElems, &f.lastCoreTileNum, &f.lastCoreTailDataNum);
    r->blockDim = cores;
}

/** The requirement's tiling, with its uint32 intermediates and its rounding to whole blocks. */
inline void SeedFields(int64_t n, int64_t elem, const Knobs& k, const Variant& v, TilingResult* r) {
    BceGradTilingData& f = r->data;
    std::memset(&f, 0, sizeof f);
    uint64_t block = static_cast<uint64_t>(k.blockBytes);
    uint64_t e = static_cast<uint64_t>(elem);
    uint64_t tileBlockNum = static_cast<uint64_t>(k.tileBytes) / block;
    tileBlockNum = (tileBlockNum > 1 ? tileBlockNum : 1) & kU32;
    uint64_t tileData = ((tileBlockNum * block) / e) & kU32;
    if (tileData == 0) tileData = 1;
    uint64_t blocksTotal = (static_cast<uint64_t>(n) * e + block - 1) / block;
    uint64_t cores = static_cast<uint64_t>(k.coreNum) < blocksTotal ? static_cast<uint64_t>(k.coreNum) : blocksTotal;
    if (cores == 0) cores = 1;
    uint64_t every = blocksTotal / cores;
    uint64_t tailBlocks = (blocksTotal % cores) & kU32;
    uint64_t small = (every * block / e) & kU32;
    uint64_t smallTiles = (every / tileBlockNum) & kU32;
    uint64_t finalSmall = every % tileBlockNum == 0 ? smallTiles : (smallTiles + 1) & kU32;
    int64_t smallTail = static_cast<int64_t>(small) - static_cast<int64_t>(tileData * smallTiles);
    smallTail = smallTail <= 0 ? static_cast<int64_t>(tileData) : static_cast<int64_t>(smallTail & kU32);
    uint64_t bigEvery = every + 1;
    uint64_t big = (bigEvery * block / e) & kU32;
    uint64_t bigTiles = (bigEvery / tileBlockNum) & kU32;
    uint64_t finalBig = bigEvery % tileBlockNum == 0 ? bigTiles : (bigTiles + 1) & kU32;
    int64_t bigTail = static_cast<int64_t>(big) - static_cast<int64_t>(tileData * bigTiles);
    bigTail = bigTail <= 0 ? static_cast<int64_t>(tileData) : static_cast<int64_t>(bigTail & kU32);
    f.totalLength = n;
    f.smallCoreDataNum = static_cast<int64_t>(small);
    f.bigCoreDataNum = static_cast<int64_t>(big);
    f.finalBigTileNum = static_cast<int64_t>(finalBig);
    f.finalSmallTileNum = static_cast<int64_t>(finalSmall);
    f.tileDataNum = static_cast<int64_t>(tileData);
    f.smallTailDataNum = smallTail;
    f.bigTailDataNum = bigTail;
    f.tailBlockNum = static_cast<int64_t>(tailBlocks);
    f.reduction = static_cast<int64_t>(v.reduction);
    f.lastCoreDataNum = f.smallCoreDataNum;  // the seed's last core is a small core
    f.lastCoreTileNum = f.finalSmallTileNum;
    f.lastCoreTailDataNum = f.smallTailDataNum;
    f.scaleBits = ScaleBits(v.reduction, n);
    f.posWeightClasses = 0;
    r->blockDim = static_cast<int64_t>(cores);
}

/** Compute the tiling of one call with n elements; err is set when the status is not Ok. */
inline Status ComputeTiling(int64_t n, const Variant& v, const Knobs& knobs, const Platform& p, Scheme scheme,
                            TilingResult* out, const char** err) {
    if (n < 0) {
        *err = "negative element count";
        return Status::BadParam;
    }
    if (v.posWeight == PosWeight::LastDim && v.classes < 1 && n) {
        *err = "pos_weight last_dim needs a last dim >= 1";
        return Status::BadParam;
    }
    BufferPlan plan;
    Status s = MakePlan(v, scheme, &plan, err);
    if (s != Status::Ok) return s;
    s = ResolveKnobs(knobs, plan, p, scheme, &out->knobs, err);
    if (s != Status::Ok) return s;
    if (scheme == Scheme::Seed) {
        SeedFields(n, plan.elemBytes, out->knobs, v, out);
    } else {
        ExactFields(n, plan.elemBytes, out->knobs, v, out);
    }
    out->tilingKey = TilingKey(v, out->knobs.bufferNum);
    out->data.tilingKey = out->tilingKey;
    return Status::Ok;
}

}  // namespace bce_grad

#endif  // BCE_GRAD_TILING_CORE_H
