/**
 * Host tiling of BinaryCrossEntropyGrad as pure C++17 (no CANN headers), for the "seed" scheme (the
 * requirement's tiling, flaws included) and the "exact" scheme (every element on exactly one core and
 * tile, bce_grad_core_split.h). The CANN TilingFunc wraps this with the platform's UB size and vector core
 * count; Python's tiling_model fills its struct with the same ExactFields / SeedFields through the engine
 * binding, and tests compile the whole path with g++ and compare it with tiling_model on thousands of cases.
 */
#ifndef BCE_GRAD_TILING_CORE_H
#define BCE_GRAD_TILING_CORE_H

#include <cstdint>
#include <cstring>

#include "bce_grad_core_split.h"
#include "bce_grad_cost_model.h"
#include "bce_grad_tiling_data.h"

namespace bce_grad {

enum class Dtype : int64_t { Float32 = 0, Float16 = 1, BFloat16 = 2, Int32 = 3, Int16 = 4 };
enum class Reduction : int64_t { None = 0, Sum = 1, Mean = 2 };
/** A broadcast operand's form (tiling_model.variant.BROADCAST_FORMS; its digit in the tiling key). */
enum class Form : int64_t { None = 0, Full = 1, LastDim = 2, Rows = 3, Scalar = 4 };
using PosWeight = Form;  // pos_weight takes None, Full and LastDim
enum class Wrt : int64_t { Logit = 0, Probability = 1 };
/** The kernel mode: BinaryCrossEntropyGrad (the requirement's kernel), or the fused loss and gradient of
 *  BCEWithLogits (bce_with_logits_fused: reads x and y once, writes dx and the loss or per-core sums). */
enum class Mode : int64_t { Grad = 0, Fused = 1 };
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
    Form weight = Form::Full;
    PosWeight posWeight = PosWeight::None;
    Wrt wrt = Wrt::Logit;
    Mode mode = Mode::Grad;
    int64_t classes = 0;       // C of a last-dim pos_weight
    int64_t weightPeriod = 0;  // P of a last-dim weight, R of a rows weight
};

inline bool WeightTile(Form f) { return f == Form::Full || f == Form::LastDim || f == Form::Rows; }

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
constexpr int64_t kLastDimStageElems = 768;  // staging buffer of the pos_weight row copy
constexpr int64_t kLastDimSuperElems = 256;  // rows shorter than this are replicated in UB first

inline int64_t DtypeBytes(Dtype d) { return (d == Dtype::Float32 || d == Dtype::Int32) ? 4 : 2; }
inline bool IsFloat(Dtype d) { return d == Dtype::Float32 || d == Dtype::Float16 || d == Dtype::BFloat16; }
inline int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

/** The tensors a kernel may read element by element, in the order its VECIN queues are created. */
enum InputBit : uint32_t { kGrad = 1u, kLogits = 2u, kLabels = 4u, kWeight = 8u, kPosWeight = 16u };

/**
 * The kernel's UB plan: what InitBuffer asks for, every buffer rounded up to 32 B as TPipe does. The one
 * UB arithmetic: the host's default tile (ResolveKnobs), and through the engine binding Python's budget
 * checks, search spaces and the explorer's drawing of the buffers (tiling_model.kernels.ElementwiseKernel).
 */
struct BufferPlan {
    int64_t fullInputs;
    int64_t outputs;
    int64_t elemBytes;
    int64_t tempBytesPerElem;
    int64_t scalarQueueBytes;
    int64_t rowBytes;
    int64_t tempBuffers;     // TBufs the temporaries are split into (each rounded up to 32 B)
    uint32_t inputMask = 0;  // InputBits of the full inputs (MakePlan's kernels; 0 for a generic one)
    int64_t sumBytes = 0;    // the fused mode's per-tile loss sum (ReduceSum's destination), 0 without one

    int64_t Streams() const { return fullInputs + outputs; }
    /** One queue buffer of a tile (a stream has bufferNum of them). */
    int64_t QueueBytes(int64_t tileBytes) const { return RoundUp(tileBytes, 32); }
    /** One temporary TBuf of a tile (there are TempCount() of them). */
    int64_t TempBytes(int64_t tileBytes) const {
        const int64_t elems = tileBytes / elemBytes;
        return tempBuffers ? RoundUp(tempBytesPerElem / tempBuffers * elems, 32) : RoundUp(tempBytesPerElem * elems, 32);
    }
    int64_t TempCount() const { return tempBuffers ? tempBuffers : (tempBytesPerElem ? 1 : 0); }
    /** One buffer of the per-tile scalar queue (bufferNum of them), 0 without one. */
    int64_t ScalarQueueBuffer() const { return scalarQueueBytes ? RoundUp(scalarQueueBytes, 32) : 0; }
    /** The last-dim rows' staging TBuf, 0 without one. */
    int64_t RowBuffer() const { return RoundUp(rowBytes, 32); }

    /** The fused sum/mean's ReduceSum destination TBuf, 0 without one. */
    int64_t SumBuffer() const { return RoundUp(sumBytes, 32); }

    int64_t FixedUb(int64_t bufferNum) const { return bufferNum * ScalarQueueBuffer() + RowBuffer() + SumBuffer(); }
    int64_t UbBytes(int64_t tileBytes, int64_t bufferNum) const {
        return Streams() * bufferNum * QueueBytes(tileBytes) + TempCount() * TempBytes(tileBytes) + FixedUb(bufferNum);
    }
    /** The largest 32-B multiple tile whose buffers fit in budget (0 if none). */
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

/**
 * The fused mode's plan (bce_grad.h FusedCompute): x, y and the weights as the grad mode reads them, no grad;
 * dx out, and the loss out for reduction none (sum / mean reduce each tile's loss into a 32-B TBuf). Float
 * compute temporaries: B always; A (the loss) unless float32 none writes it in its output tile; half types
 * also X, Y, D (dx) and the casts of pos_weight and a full or last-dim weight; a rows weight's expansion.
 */
inline Status MakeFusedPlan(const Variant& v, int64_t elem, int64_t row, BufferPlan* plan, const char** err) {
    if (!IsFloat(v.dtype)) {
        *err = "the fused loss needs a float dtype";
        return Status::Unsupported;
    }
    if (v.wrt != Wrt::Logit) {
        *err = "the fused loss is BCEWithLogits: its gradient is with respect to the logit";
        return Status::Unsupported;
    }
    const bool none = v.reduction == Reduction::None;
    const bool widen = elem == 2;
    const bool weightStream = v.weight == Form::Full || v.weight == Form::LastDim;
    const uint32_t mask = kLogits | kLabels | (WeightTile(v.weight) ? kWeight : 0u) |
                          (v.posWeight != PosWeight::None ? kPosWeight : 0u);
    int64_t inputs = 0;
    for (uint32_t m = mask; m; m &= m - 1) ++inputs;
    int64_t temps = 1 + (widen || !none ? 1 : 0);  // B; A
    if (widen) temps += 3 + (v.posWeight != PosWeight::None ? 1 : 0) + (weightStream ? 1 : 0);  // X, Y, D; casts
    temps += v.weight == Form::Rows ? 1 : 0;
    *plan = {inputs, none ? 2 : 1, elem, temps * 4, 0, row, temps, mask, none ? 0 : 32};
    return Status::Ok;
}

inline Status MakePlan(const Variant& v, Scheme scheme, BufferPlan* plan, const char** err) {
    int64_t elem = DtypeBytes(v.dtype);
    if (!IsFloat(v.dtype) && v.reduction != Reduction::None) {
        *err = "int dtypes support reduction none only";
        return Status::Unsupported;
    }
    if (scheme == Scheme::Seed) {
        if (v.weight != Form::Full || v.posWeight != PosWeight::None || v.wrt != Wrt::Logit || v.mode != Mode::Grad) {
            *err = "the seed scheme is the requirement's kernel: weight always read, no pos_weight, wrt=logit, "
                   "mode grad";
            return Status::Unsupported;
        }
        bool none = v.reduction == Reduction::None;
        uint32_t mask = (none ? kGrad : 0u) | kLogits | kLabels | kWeight;
        *plan = {none ? 4 : 3, 1, elem, 0, none ? 0 : kSeedScalarQueueElems * elem, 0, 0, mask};
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
    if (v.posWeight == PosWeight::Rows || v.posWeight == PosWeight::Scalar) {
        *err = "pos_weight is read full or along the last dim";
        return Status::Unsupported;
    }
    bool lastDim = v.posWeight == PosWeight::LastDim || v.weight == Form::LastDim;
    int64_t row = lastDim ? kLastDimStageElems * elem : 0;  // one staging buffer for both rows
    if (v.mode == Mode::Fused) return MakeFusedPlan(v, elem, row, plan, err);
    const uint32_t mask = (v.reduction == Reduction::None ? kGrad : 0u) | kLogits | kLabels |
                          (WeightTile(v.weight) ? kWeight : 0u) | (v.posWeight != PosWeight::None ? kPosWeight : 0u);
    int64_t inputs = 0;
    for (uint32_t m = mask; m; m &= m - 1) ++inputs;
    int64_t temps = widen ? 2 : 0;  // A = float(p), B = float(y)
    if (v.posWeight != PosWeight::None) {
        temps += widen ? 1 : 0;  // C = float(pw); native types compute in the pw tile
    } else if (v.wrt == Wrt::Probability) {
        temps += 1;  // C = max(p*(1-p), 1e-12)
    }
    temps += v.weight == Form::Rows ? 1 : 0;  // the row values expanded
    *plan = {inputs, 1, elem, temps * work, 0, row, temps, mask};
    return Status::Ok;
}

/**
 * A broadcast operand's form from the shapes of a call, as PyTorch broadcasts (tiling_model.broadcast_of):
 * dims aligned from the right, a 1 stretches; none stretched is Full, all Scalar, the leading stretched
 * and the trailing kept LastDim (P = the kept dims' product), the leading kept and the trailing
 * stretched Rows (R = the stretched dims' product). Anything else is refused.
 */
inline Status BroadcastFromShape(bool present, const int64_t* wDims, int64_t wRank, const int64_t* inDims,
                                 int64_t inRank, Form* form, int64_t* periodOut, const char** err) {
    *form = Form::None;
    *periodOut = 0;
    if (!present) return Status::Ok;
    int64_t skip = wRank > inRank ? wRank - inRank : 0;
    for (int64_t i = 0; i < skip; ++i) {
        if (wDims[i] != 1) {
            *err = "the operand has more dims than the input";
            return Status::BadParam;
        }
    }
    // per input dim: 0 kept, 1 stretched, -1 either (a dim of 1)
    int64_t marks[64];
    if (inRank > 64) {
        *err = "the input has more than 64 dims";
        return Status::BadParam;
    }
    int64_t firstKept = -1, firstStretched = -1, lastKept = -1, lastStretched = -1;
    for (int64_t d = 0; d < inRank; ++d) {
        int64_t wi = d - (inRank - (wRank - skip));
        int64_t w = wi >= 0 ? wDims[skip + wi] : 1;
        int64_t in = inDims[d];
        if (w == in) {
            marks[d] = in == 1 ? -1 : 0;
        } else if (w == 1) {
            marks[d] = 1;
        } else {
            *err = "the operand does not broadcast to the input's shape";
            return Status::BadParam;
        }
        if (marks[d] == 0) {
            if (firstKept < 0) firstKept = d;
            lastKept = d;
        } else if (marks[d] == 1) {
            if (firstStretched < 0) firstStretched = d;
            lastStretched = d;
        }
    }
    if (firstStretched < 0) {
        *form = Form::Full;
        return Status::Ok;
    }
    if (firstKept < 0) {
        *form = Form::Scalar;
        return Status::Ok;
    }
    int64_t period = 1;
    if (lastStretched < firstKept) {
        for (int64_t d = 0; d < inRank; ++d) period *= marks[d] == 0 ? inDims[d] : 1;
        *form = Form::LastDim;
        *periodOut = period;
        return Status::Ok;
    }
    if (lastKept < firstStretched) {
        for (int64_t d = 0; d < inRank; ++d) period *= marks[d] == 1 ? inDims[d] : 1;
        *form = Form::Rows;
        *periodOut = period;
        return Status::Ok;
    }
    *err = "the operand stretches dims both before and after kept ones: materialise it";
    return Status::BadParam;
}

/** The weight's form: any broadcast form (BroadcastFromShape). */
inline Status WeightFromShape(bool present, const int64_t* wDims, int64_t wRank, const int64_t* inDims,
                              int64_t inRank, Variant* v, const char** err) {
    return BroadcastFromShape(present, wDims, wRank, inDims, inRank, &v->weight, &v->weightPeriod, err);
}

/**
 * pos_weight's form (tiling_model.pos_weight_of): what the kernel reads of it is absent, the input's
 * shape, or [C] along the last dim (a single value is that when the last dim is 1); else refused.
 */
inline Status PosWeightFromShape(bool present, const int64_t* pwDims, int64_t pwRank, const int64_t* inDims,
                                 int64_t inRank, Variant* v, const char** err) {
    Form form;
    int64_t period;
    v->posWeight = PosWeight::None;
    v->classes = 0;
    Status s = BroadcastFromShape(present, pwDims, pwRank, inDims, inRank, &form, &period, err);
    if (s != Status::Ok) return s;
    const int64_t last = inRank > 0 ? inDims[inRank - 1] : 1;
    if (form == Form::Scalar && last == 1) {
        form = Form::LastDim;
        period = 1;
    }
    if (form == Form::None || form == Form::Full || (form == Form::LastDim && period == last)) {
        v->posWeight = form;
        v->classes = form == Form::LastDim ? period : 0;
        return Status::Ok;
    }
    *err = "pos_weight must have the input's shape or be [C] with C the input's last dim";
    return Status::BadParam;
}

/** GM workspace of a last-dim operand of period P: each core's periodic row x[k % P], k < tile + 2P + 256. */
inline int64_t LastDimWorkspaceElems(int64_t tileElems, int64_t classes) {
    return tileElems + 2 * classes + kLastDimSuperElems;
}

/** GM workspace the kernel needs: per core, pos_weight's periodic row, then the weight's (what the struct's
 *  tile and periods say; tiling_model TilingData.workspace_bytes asks this). */
inline int64_t WorkspaceBytes(const BceGradTilingData& f, int64_t blockDim, int64_t elem, bool posWeightLastDim,
                              bool weightLastDim) {
    if (blockDim <= 0) return 0;
    int64_t perCore = 0;
    if (posWeightLastDim) perCore += RoundUp(LastDimWorkspaceElems(f.tileDataNum, f.posWeightClasses) * elem, 32);
    if (weightLastDim) perCore += RoundUp(LastDimWorkspaceElems(f.tileDataNum, f.weightPeriod) * elem, 32);
    return perCore * blockDim;
}

inline int64_t WorkspaceBytes(const Variant& v, const TilingResult& r) {
    return WorkspaceBytes(r.data, r.blockDim, DtypeBytes(v.dtype), v.posWeight == PosWeight::LastDim,
                          v.weight == Form::LastDim);
}

inline int64_t TilingKey(const Variant& v, int64_t bufferNum) {
    int64_t schMode = v.reduction == Reduction::None ? 0 : 1;
    return schMode + 10 * static_cast<int64_t>(v.dtype) + 100 * static_cast<int64_t>(v.weight) + 1000 * bufferNum +
           10000 * static_cast<int64_t>(v.posWeight) + 100000 * static_cast<int64_t>(v.wrt) +
           1000000 * static_cast<int64_t>(v.mode);
}

inline int64_t ScaleBits(Reduction r, int64_t n) {
    float scale = r != Reduction::Mean ? 1.0f : (n ? static_cast<float>(1.0 / static_cast<double>(n)) : 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &scale, sizeof bits);
    return static_cast<int64_t>(bits);
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
        int64_t vecin = cost::VecinQueues(plan.fullInputs, plan.scalarQueueBytes);
        while (k.bufferNum > 1 && !cost::QueueLimitAllows(vecin, plan.outputs, k.bufferNum)) --k.bufferNum;
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

/** What the struct carries besides the split: the reduction, the operands' periods and the tiling key. */
struct StructExtras {
    Reduction reduction = Reduction::None;
    int64_t classes = 0;  // C of a last-dim pos_weight, else 0
    int64_t period = 0;   // P of a last-dim weight, R of a rows weight, else 0
    int64_t tilingKey = 0;
};

inline void FillExtras(int64_t n, const StructExtras& x, BceGradTilingData* f) {
    f->reduction = static_cast<int64_t>(x.reduction);
    f->scaleBits = ScaleBits(x.reduction, n);
    f->posWeightClasses = x.classes;
    f->weightPeriod = x.period;
    f->tilingKey = x.tilingKey;
}

/** Exact scheme: every element on exactly one core and tile, the last core cut to end at element n-1
 *  (bce_grad_core_split.h). Returns the block dim. */
inline int64_t ExactFields(int64_t n, int64_t elem, const Knobs& k, const StructExtras& x, BceGradTilingData* f) {
    std::memset(f, 0, sizeof *f);
    const int64_t blockDim = SplitFields(n, elem, k.blockBytes, k.tileBytes, k.coreNum, f);
    FillExtras(n, x, f);
    return blockDim;
}

/** The requirement's tiling, with its uint32 intermediates and its rounding to whole blocks. */
inline int64_t SeedFields(int64_t n, int64_t elem, const Knobs& k, const StructExtras& x, BceGradTilingData* out) {
    BceGradTilingData& f = *out;
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
    f.lastCoreDataNum = f.smallCoreDataNum;  // the seed's last core is a small core
    f.lastCoreTileNum = f.finalSmallTileNum;
    f.lastCoreTailDataNum = f.smallTailDataNum;
    FillExtras(n, x, &f);
    return static_cast<int64_t>(cores);
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
    if ((v.weight == Form::LastDim || v.weight == Form::Rows) && n && (v.weightPeriod < 1 || n % v.weightPeriod)) {
        *err = "a last_dim or rows weight needs a period >= 1 that divides the element count";
        return Status::BadParam;
    }
    BufferPlan plan;
    Status s = MakePlan(v, scheme, &plan, err);
    if (s != Status::Ok) return s;
    s = ResolveKnobs(knobs, plan, p, scheme, &out->knobs, err);
    if (s != Status::Ok) return s;
    out->tilingKey = TilingKey(v, out->knobs.bufferNum);
    StructExtras x;
    x.reduction = v.reduction;
    x.classes = v.posWeight == PosWeight::LastDim ? v.classes : 0;
    x.period = (v.weight == Form::LastDim || v.weight == Form::Rows) ? v.weightPeriod : 0;
    x.tilingKey = out->tilingKey;
    out->blockDim = scheme == Scheme::Seed ? SeedFields(n, plan.elemBytes, out->knobs, x, &out->data)
                                           : ExactFields(n, plan.elemBytes, out->knobs, x, &out->data);
    return Status::Ok;
}

}  // namespace bce_grad

#endif  // BCE_GRAD_TILING_CORE_H
