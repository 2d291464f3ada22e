/**
 * BinaryCrossEntropyGrad kernel class: CopyIn -> Compute -> CopyOut over this core's tiles with
 * BUFFER_NUM buffers per queue.
 *
 *   wrt logit:       z = w * g * ((pw*y + 1 - y) * p - pw*y)      (= w * g * (p - y) without pw)
 *   wrt probability: z = w * g * (p - y) / max(p * (1 - p), 1e-12)
 *
 * g is a tensor (reduction none) or one scalar read once (sum; mean also scales by the host's
 * float 1/N).
 *
 * The fused mode (bce_with_logits_fused.cpp; the key's mode digit) is BCEWithLogits' loss and its gradient
 * in one pass: x and y (and the weights) are read once, dx is written, and the loss (reduction none) or
 * each core's sum of it (sum / mean; the host adds the blockDim partials in order, so a run repeats):
 *
 *   coef = 1 + (pw - 1) * y,  sp = softplus(-x) = max(-x, 0) + log1p(exp(-|x|))
 *   loss = w * ((1 - y) * x + coef * sp),     dx = w * (coef * sigmoid(x) - pw * y) * scale
 *
 * (pw = 1 without pos_weight; scale 1/N for mean). log1p(e) is ln(u) - ((u - 1) - e) / u with u = 1 + e
 * (the rounding of 1 + e taken back: exact to a few ulps where e is below float's epsilon).
 *
 * Absent inputs are not read. half and bfloat16 compute in float32 (no bf16
 * arithmetic on A2); float32 and the int types compute in place in their input tiles. Tiles
 * whose byte length is not a 32-byte multiple move with DataCopyPad, so no core touches GM
 * outside its range.
 *
 * weight and pos_weight are broadcast operands, each in one form (tiling_model/variant.py):
 *   full      the input's shape: a stream like p and y;
 *   last_dim  a row of period P (pos_weight [C]; weight [C], [1, C], [B, C], ...): each core first
 *             writes the periodic row x[(start + k) % P] into its GM workspace, every tile then reads
 *             its window from there like any other input (byte-granular GM reads allow any phase);
 *   rows      (weight) one value per R consecutive elements ([N, 1], [A, B, 1]): a tile reads the
 *             values of the rows it touches and expands them in UB, one Duplicate per row;
 *   scalar    (weight) [1] or []: read once per core, applied with Muls.
 *
 * The UB plan (queues, temporaries, staging) is what the host tiling budgets for (BufferPlan / MakePlan in
 * tiling_model/include/bce_grad_tiling_core.h, which tiling_model reaches through its engine binding); the CPU
 * twin checks the kernel asks for no more.
 */
#ifndef BCE_GRAD_KERNEL_H
#define BCE_GRAD_KERNEL_H

#include "bce_grad_tiling_data.h"
#include "kernel_operator.h"

namespace bce_grad_kernel {

using namespace AscendC;

/** A broadcast operand's form: its digit in the tiling key (tiling core: bce_grad::Form). */
constexpr int64_t kFormNone = 0;
constexpr int64_t kFormFull = 1;
constexpr int64_t kFormLastDim = 2;
constexpr int64_t kFormRows = 3;
constexpr int64_t kFormScalar = 4;
constexpr int64_t kStageElems = 768;  // staging buffer of the last-dim row copies (tiling core: kLastDimStageElems)
constexpr int64_t kSuperElems = 256;  // rows shorter than this are replicated in UB first
constexpr float kProbEps = 1e-12f;

/** The tiling key's decimal digits (op_host TilingKey): schMode, dtype, weight form, BUFFER_NUM, pos_weight form,
 *  wrt, mode. */
struct Variant {
    bool scalarGrad;
    int64_t dtype;
    int64_t weight;
    int64_t bufferNum;
    int64_t posWeight;
    bool probability;
    bool fused;
};

__aicore__ inline Variant DecodeKey(int64_t key) {
    Variant v;
    v.scalarGrad = key % 10 != 0;
    v.dtype = key / 10 % 10;
    v.weight = key / 100 % 10;
    v.bufferNum = key / 1000 % 10;
    v.posWeight = key / 10000 % 10;
    v.probability = key / 100000 % 10 != 0;
    v.fused = key / 1000000 % 10 != 0;
    return v;
}

/**
 * The kernel-launch flow generates no tiling macros (GET_TILING_DATA_WITH_STRUCT exists only in
 * custom-op builds): read the struct's int64 fields from GM through the scalar unit.
 */
__aicore__ inline void LoadTiling(BceGradTilingData* t, GM_ADDR tiling) {
    constexpr uint32_t kFields = static_cast<uint32_t>(sizeof(BceGradTilingData) / sizeof(int64_t));
    static_assert(sizeof(BceGradTilingData) == kFields * sizeof(int64_t), "the tiling struct is int64 fields only");
    GlobalTensor<int64_t> src;
    src.SetGlobalBuffer((__gm__ int64_t*)tiling, kFields);
    int64_t* dst = reinterpret_cast<int64_t*>(t);
    for (uint32_t i = 0; i < kFields; ++i) {
        dst[i] = src.GetValue(i);
    }
}

template <typename T, typename U> struct IsSame {
    static constexpr bool value = false;
};
template <typename T> struct IsSame<T, T> {
    static constexpr bool value = true;
};

/** Elements per 32-byte UB alignment unit. */
template <typename T> constexpr int64_t kAlignElems = 32 / static_cast<int64_t>(sizeof(T));

/** One core's workspace region for a last-dim row of period P, in elements of T (a 32-B multiple). */
template <typename T> __aicore__ inline int64_t RowStride(int64_t tileElems, int64_t period) {
    const int64_t bytes = (tileElems + 2 * period + kSuperElems) * static_cast<int64_t>(sizeof(T));
    return (bytes + 31) / 32 * 32 / static_cast<int64_t>(sizeof(T));
}

/** The type a dtype computes in: float for the 16-bit floats, itself otherwise. */
template <typename T> struct ComputeOf {
    using type = T;
};
template <> struct ComputeOf<half> {
    using type = float;
};
template <> struct ComputeOf<bfloat16_t> {
    using type = float;
};

template <typename T> __aicore__ inline float ScalarToFloat(T v) { return static_cast<float>(v); }
template <> __aicore__ inline float ScalarToFloat<bfloat16_t>(bfloat16_t v) { return AscendC::ToFloat(v); }

__aicore__ inline float FloatFromBits(int64_t bits) {
    union {
        uint32_t u;
        float f;
    } c;
    c.u = static_cast<uint32_t>(bits);
    return c.f;
}

template <typename T, int32_t BUFFER_NUM>
class KernelBceGrad {
    using C = typename ComputeOf<T>::type;
    static constexpr bool kWiden = !IsSame<T, C>::value;
    static constexpr bool kFloat = IsSame<C, float>::value;

public:
    __aicore__ inline KernelBceGrad() {}

    /** z is the gradient; loss (the fused mode's, else nullptr) its loss tensor or per-core float sums. */
    __aicore__ inline void Init(GM_ADDR grad, GM_ADDR logits, GM_ADDR labels, GM_ADDR weight, GM_ADDR posWeight,
                                GM_ADDR z, GM_ADDR loss, GM_ADDR workspace, const BceGradTilingData& t,
                                const Variant& v, TPipe* pipe) {
        v_ = v;
        pipe_ = pipe;
        classes_ = t.posWeightClasses;
        period_ = t.weightPeriod;
        const int64_t idx = GetBlockIdx();
        const int64_t last = GetBlockNum() - 1;
        if (idx < t.tailBlockNum) {
            start_ = idx * t.bigCoreDataNum;
        } else {
            start_ = t.tailBlockNum * t.bigCoreDataNum + (idx - t.tailBlockNum) * t.smallCoreDataNum;
        }
        if (idx == last) {
            count_ = t.lastCoreDataNum;
            tileNum_ = t.lastCoreTileNum;
            tailElems_ = t.lastCoreTailDataNum;
        } else if (idx < t.tailBlockNum) {
            count_ = t.bigCoreDataNum;
            tileNum_ = t.finalBigTileNum;
            tailElems_ = t.bigTailDataNum;
        } else {
            count_ = t.smallCoreDataNum;
            tileNum_ = t.finalSmallTileNum;
            tailElems_ = t.smallTailDataNum;
        }
        tileElems_ = t.tileDataNum;
        const uint32_t tileBytes = static_cast<uint32_t>(tileElems_ * static_cast<int64_t>(sizeof(T)));

        logitsGm_.SetGlobalBuffer((__gm__ T*)logits + start_, count_);
        labelsGm_.SetGlobalBuffer((__gm__ T*)labels + start_, count_);
        zGm_.SetGlobalBuffer((__gm__ T*)z + start_, count_);
        pipe_->InitBuffer(pQue_, BUFFER_NUM, tileBytes);
        pipe_->InitBuffer(yQue_, BUFFER_NUM, tileBytes);
        if (v_.fused) {  // no grad: dx is scaled by the reduction alone (1, or 1/N for mean)
            scale_ = FloatFromBits(t.scaleBits);
            if (v_.scalarGrad) {
                partialGm_.SetGlobalBuffer((__gm__ float*)loss + idx, 1);  // this core's sum of the loss
            } else {
                lossGm_.SetGlobalBuffer((__gm__ T*)loss + start_, count_);
            }
        } else if (v_.scalarGrad) {
            GlobalTensor<T> g;
            g.SetGlobalBuffer((__gm__ T*)grad, 1);
            scale_ = ScalarToFloat<T>(g.GetValue(0)) * FloatFromBits(t.scaleBits);
        } else {
            gradGm_.SetGlobalBuffer((__gm__ T*)grad + start_, count_);
            pipe_->InitBuffer(gQue_, BUFFER_NUM, tileBytes);
        }
        // the workspace: per core, pos_weight's periodic row, then the weight's
        const int64_t pwStride = v_.posWeight == kFormLastDim ? RowStride<T>(tileElems_, classes_) : 0;
        const int64_t wStride = v_.weight == kFormLastDim ? RowStride<T>(tileElems_, period_) : 0;
        __gm__ T* ws = (__gm__ T*)workspace + idx * (pwStride + wStride);
        if (v_.weight == kFormFull) {
            weightGm_.SetGlobalBuffer((__gm__ T*)weight + start_, count_);
        } else if (v_.weight == kFormLastDim) {
            wRowGm_.SetGlobalBuffer((__gm__ T*)weight, period_);
            weightGm_.SetGlobalBuffer(ws + pwStride, wStride);
        } else if (v_.weight == kFormRows) {
            weightGm_.SetGlobalBuffer((__gm__ T*)weight, t.totalLength / period_);  // one value per row
        } else if (v_.weight == kFormScalar) {
            GlobalTensor<T> w;
            w.SetGlobalBuffer((__gm__ T*)weight, 1);
            wValue_ = w.GetValue(0);
        }
        if (v_.weight == kFormFull || v_.weight == kFormLastDim || v_.weight == kFormRows) {
            pipe_->InitBuffer(wQue_, BUFFER_NUM, tileBytes);  // rows: the tile's row values
        }
        if (v_.posWeight == kFormFull) {
            pwGm_.SetGlobalBuffer((__gm__ T*)posWeight + start_, count_);
        } else if (v_.posWeight == kFormLastDim) {
            rowGm_.SetGlobalBuffer((__gm__ T*)posWeight, classes_);
            pwGm_.SetGlobalBuffer(ws, pwStride);
        }
        if (v_.posWeight != kFormNone) {
            pipe_->InitBuffer(pwQue_, BUFFER_NUM, tileBytes);
        }
        pipe_->InitBuffer(zQue_, BUFFER_NUM, tileBytes);
        const uint32_t workBytes = static_cast<uint32_t>(tileElems_ * static_cast<int64_t>(sizeof(C)));
        if (v_.fused) {
            InitFused(tileBytes, workBytes);
        } else {
            if constexpr (kWiden) {
                pipe_->InitBuffer(tmpA_, workBytes);
                pipe_->InitBuffer(tmpB_, workBytes);
            }
            if ((kWiden && v_.posWeight != kFormNone) || v_.probability) {
                pipe_->InitBuffer(tmpC_, workBytes);
            }
        }
        if (v_.weight == kFormRows) {
            pipe_->InitBuffer(wide_, workBytes);  // the row values expanded, in the compute type
        }
        if (v_.posWeight == kFormLastDim || v_.weight == kFormLastDim) {
            pipe_->InitBuffer(stage_, static_cast<uint32_t>(kStageElems * static_cast<int64_t>(sizeof(T))));
        }
    }

    __aicore__ inline void Process() {
        if (count_ <= 0) {
            if (v_.fused && v_.scalarGrad) WritePartial();
            return;
        }
        if (v_.posWeight == kFormLastDim) {
            WritePeriodicRow(rowGm_, classes_, pwGm_);
        }
        if (v_.weight == kFormLastDim) {
            WritePeriodicRow(wRowGm_, period_, weightGm_);
        }
        for (int64_t i = 0; i < tileNum_; ++i) {
            const int64_t len = i == tileNum_ - 1 ? tailElems_ : tileElems_;
            CopyIn(i, len);
            if (v_.fused) {
                FusedCompute(i, len);
            } else {
                Compute(i, len);
            }
            CopyOut(i, len);
        }
        if (v_.fused && v_.scalarGrad) WritePartial();
    }

private:
    /** GM -> UB of one tile: DataCopy when the bytes are a 32-B multiple, DataCopyPad otherwise. */
    __aicore__ inline void Load(const LocalTensor<T>& dst, const GlobalTensor<T>& src, int64_t len) {
        const uint32_t bytes = static_cast<uint32_t>(len * static_cast<int64_t>(sizeof(T)));
        if (bytes % 32 == 0) {
            DataCopy(dst, src, static_cast<uint32_t>(len));
        } else {
            DataCopyExtParams copy{1, bytes, 0, 0, 0};
            DataCopyPadExtParams<T> pad{false, 0, 0, T()};
            DataCopyPad(dst, src, copy, pad);
        }
    }

    __aicore__ inline void Store(const GlobalTensor<T>& dst, const LocalTensor<T>& src, int64_t len) {
        const uint32_t bytes = static_cast<uint32_t>(len * static_cast<int64_t>(sizeof(T)));
        if (bytes % 32 == 0) {
            DataCopy(dst, src, static_cast<uint32_t>(len));
        } else {
            DataCopyExtParams copy{1, bytes, 0, 0, 0};
            DataCopyPad(dst, src, copy);
        }
    }

    __aicore__ inline void LoadTo(TQue<TPosition::VECIN, 1>& que, const GlobalTensor<T>& src, int64_t len) {
        LocalTensor<T> t = que.template AllocTensor<T>();
        Load(t, src, len);
        que.EnQue(t);
    }

    __aicore__ inline void CopyIn(int64_t i, int64_t len) {
        const int64_t off = i * tileElems_;
        LoadTo(pQue_, logitsGm_[off], len);
        LoadTo(yQue_, labelsGm_[off], len);
        if (!v_.scalarGrad && !v_.fused) LoadTo(gQue_, gradGm_[off], len);
        if (v_.weight == kFormFull) LoadTo(wQue_, weightGm_[off], len);
        if (v_.weight == kFormLastDim) LoadTo(wQue_, weightGm_[(off % period_)], len);
        if (v_.weight == kFormRows) {
            const int64_t first = (start_ + off) / period_;
            LoadTo(wQue_, weightGm_[first], (start_ + off + len - 1) / period_ - first + 1);
        }
        if (v_.posWeight == kFormFull) LoadTo(pwQue_, pwGm_[off], len);
        if (v_.posWeight == kFormLastDim) LoadTo(pwQue_, pwGm_[(off % classes_)], len);
    }

    /**
     * dst[k] = value of the row of element start + off + k, for k < len: one Duplicate per row, last row
     * first. Vector operands start 32-B aligned, so each Duplicate starts at its row's first element
     * rounded down, over the end of the row before; that row, written next, puts those back.
     */
    template <typename U>
    __aicore__ inline void ExpandRows(const LocalTensor<U>& dst, const LocalTensor<T>& values, int64_t off,
                                      int64_t len) {
        SyncFlag<HardEvent::MTE2_S>();  // the scalar unit reads the values the DMA brought
        const int64_t g = start_ + off;
        const int64_t first = g / period_;
        for (int64_t r = (g + len - 1) / period_; r >= first; --r) {
            const int64_t a = r * period_ > g ? r * period_ - g : 0;
            const int64_t b = (r + 1) * period_ - g < len ? (r + 1) * period_ - g : len;
            const int64_t a0 = a / kAlignElems<U> * kAlignElems<U>;
            const T value = values.GetValue(static_cast<uint32_t>(r - first));
            U u;
            if constexpr (kWiden) {
                u = ScalarToFloat<T>(value);
            } else {
                u = value;
            }
            Duplicate(dst[static_cast<uint32_t>(a0)], u, static_cast<int32_t>(b - a0));
        }
    }

    __aicore__ inline void Compute(int64_t i, int64_t len) {
        const int32_t n = static_cast<int32_t>(len);
        LocalTensor<T> z = zQue_.template AllocTensor<T>();
        LocalTensor<T> p = pQue_.template DeQue<T>();
        LocalTensor<T> y = yQue_.template DeQue<T>();
        LocalTensor<T> g, w, pw;
        const bool weightTile = v_.weight == kFormFull || v_.weight == kFormLastDim || v_.weight == kFormRows;
        if (!v_.scalarGrad) g = gQue_.template DeQue<T>();
        if (weightTile) w = wQue_.template DeQue<T>();
        if (v_.posWeight != kFormNone) pw = pwQue_.template DeQue<T>();
        if constexpr (kWiden) {
            LocalTensor<float> a = tmpA_.template Get<float>();
            LocalTensor<float> b = tmpB_.template Get<float>();
            Cast(a, p, RoundMode::CAST_NONE, static_cast<uint32_t>(n));
            Cast(b, y, RoundMode::CAST_NONE, static_cast<uint32_t>(n));
            if (v_.posWeight != kFormNone) {
                LocalTensor<float> c = tmpC_.template Get<float>();
                Cast(c, pw, RoundMode::CAST_NONE, static_cast<uint32_t>(n));
                PosWeightTerm(a, b, c, n);
            } else if (v_.probability) {
                LocalTensor<float> c = tmpC_.template Get<float>();
                ProbabilityTerm(a, b, c, n);
            } else {
                Sub(a, a, b, n);
            }
            if (v_.scalarGrad) {
                Muls(a, a, scale_, n);
            } else {
                Cast(b, g, RoundMode::CAST_NONE, static_cast<uint32_t>(n));
                Mul(a, a, b, n);
            }
            if (v_.weight == kFormFull || v_.weight == kFormLastDim) {
                Cast(b, w, RoundMode::CAST_NONE, static_cast<uint32_t>(n));
                Mul(a, a, b, n);
            } else if (v_.weight == kFormRows) {
                LocalTensor<float> e = wide_.template Get<float>();
                ExpandRows(e, w, i * tileElems_, len);
                Mul(a, a, e, n);
            } else if (v_.weight == kFormScalar) {
                Muls(a, a, ScalarToFloat<T>(wValue_), n);
            }
            Cast(z, a, RoundMode::CAST_RINT, static_cast<uint32_t>(n));
        } else {
            if (v_.posWeight != kFormNone) {
                PosWeightTerm(p, y, pw, n);
            } else if (v_.probability) {
                if constexpr (kFloat) {
                    LocalTensor<T> c = tmpC_.template Get<T>();
                    ProbabilityTerm(p, y, c, n);
                }
            } else {
                Sub(p, p, y, n);
            }
            // the last multiply writes the output tile
            const LocalTensor<T>& gradDst = v_.weight == kFormNone ? z : p;
            if (v_.scalarGrad) {
                if constexpr (kFloat) {
                    Muls(gradDst, p, static_cast<T>(scale_), n);
                }
            } else {
                Mul(gradDst, p, g, n);
            }
            if (v_.weight == kFormFull || v_.weight == kFormLastDim) {
                Mul(z, p, w, n);
            } else if (v_.weight == kFormRows) {
                LocalTensor<T> e = wide_.template Get<T>();
                ExpandRows(e, w, i * tileElems_, len);
                Mul(z, p, e, n);
            } else if (v_.weight == kFormScalar) {
                Muls(z, p, wValue_, n);
            }
        }
        zQue_.EnQue(z);
        pQue_.FreeTensor(p);
        yQue_.FreeTensor(y);
        if (!v_.scalarGrad) gQue_.FreeTensor(g);
        if (weightTile) wQue_.FreeTensor(w);
        if (v_.posWeight != kFormNone) pwQue_.FreeTensor(pw);
    }

    /** a <- (pw*y + 1 - y) * a - pw*y, with c = pw on entry (c ends as pw*y, b as the coefficient). */
    template <typename U>
    __aicore__ inline void PosWeightTerm(const LocalTensor<U>& a, const LocalTensor<U>& b, const LocalTensor<U>& c,
                                         int32_t n) {
        Mul(c, c, b, n);
        Sub(b, c, b, n);
        Adds(b, b, static_cast<U>(1), n);
        Mul(a, a, b, n);
        Sub(a, a, c, n);
    }

    /** a <- (a - b) / max(a * (1 - a), 1e-12), with c as scratch. */
    template <typename U>
    __aicore__ inline void ProbabilityTerm(const LocalTensor<U>& a, const LocalTensor<U>& b, const LocalTensor<U>& c,
                                           int32_t n) {
        Muls(c, a, static_cast<U>(-1), n);
        Adds(c, c, static_cast<U>(1), n);
        Mul(c, c, a, n);
        Maxs(c, c, static_cast<U>(kProbEps), n);
        Sub(a, a, b, n);
        Div(a, a, c, n);
    }

    __aicore__ inline void CopyOut(int64_t i, int64_t len) {
        LocalTensor<T> z = zQue_.template DeQue<T>();
        Store(zGm_[i * tileElems_], z, len);
        zQue_.FreeTensor(z);
        if (v_.fused && !v_.scalarGrad) {
            LocalTensor<T> l = lossQue_.template DeQue<T>();
            Store(lossGm_[i * tileElems_], l, len);
            lossQue_.FreeTensor(l);
        }
    }

    /** The fused mode's buffers (tiling core MakeFusedPlan): the loss queue (none) or the sum's TBuf, and the
     *  float temporaries; half types also widen x, y, pos_weight and a streamed weight. */
    __aicore__ inline void InitFused(uint32_t tileBytes, uint32_t workBytes) {
        const bool none = !v_.scalarGrad;
        if (none) {
            pipe_->InitBuffer(lossQue_, BUFFER_NUM, tileBytes);
        } else {
            pipe_->InitBuffer(sum_, 32);
        }
        pipe_->InitBuffer(tmpB_, workBytes);
        if (kWiden || !none) {
            pipe_->InitBuffer(tmpA_, workBytes);
        }
        if constexpr (kWiden) {
            pipe_->InitBuffer(tmpX_, workBytes);
            pipe_->InitBuffer(tmpY_, workBytes);
            pipe_->InitBuffer(tmpD_, workBytes);
            if (v_.posWeight != kFormNone) pipe_->InitBuffer(tmpC_, workBytes);
            if (v_.weight == kFormFull || v_.weight == kFormLastDim) pipe_->InitBuffer(tmpW_, workBytes);
        }
    }

    /**
     * One tile of the fused loss and gradient (the file comment's formulas). X, Y, PW, W are the tile's
     * inputs in the compute type (widened copies for half types, the input tiles themselves for float32,
     * which are consumed); A ends as the loss, D as dx (float32: the output tiles themselves), B is scratch.
     */
    __aicore__ inline void FusedCompute(int64_t i, int64_t len) {
        if constexpr (kFloat) {  // the fused mode runs float dtypes only (MakeFusedPlan)
            const int32_t n = static_cast<int32_t>(len);
            const uint32_t un = static_cast<uint32_t>(n);
            const bool none = !v_.scalarGrad;
            const bool weightTile = v_.weight == kFormFull || v_.weight == kFormLastDim || v_.weight == kFormRows;
            LocalTensor<T> z = zQue_.template AllocTensor<T>();
            LocalTensor<T> l;
            if (none) l = lossQue_.template AllocTensor<T>();
            LocalTensor<T> x = pQue_.template DeQue<T>();
            LocalTensor<T> y = yQue_.template DeQue<T>();
            LocalTensor<T> w, pw;
            if (weightTile) w = wQue_.template DeQue<T>();
            if (v_.posWeight != kFormNone) pw = pwQue_.template DeQue<T>();
            LocalTensor<C> X, Y, PW, W, A, D;
            LocalTensor<C> B = tmpB_.template Get<C>();
            if constexpr (kWiden) {
                X = tmpX_.template Get<C>();
                Y = tmpY_.template Get<C>();
                D = tmpD_.template Get<C>();
                A = tmpA_.template Get<C>();
                Cast(X, x, RoundMode::CAST_NONE, un);
                Cast(Y, y, RoundMode::CAST_NONE, un);
                if (v_.posWeight != kFormNone) {
                    PW = tmpC_.template Get<C>();
                    Cast(PW, pw, RoundMode::CAST_NONE, un);
                }
                if (v_.weight == kFormFull || v_.weight == kFormLastDim) {
                    W = tmpW_.template Get<C>();
                    Cast(W, w, RoundMode::CAST_NONE, un);
                }
            } else {
                X = x;
                Y = y;
                PW = pw;
                W = w;
                D = z;
                A = none ? l : tmpA_.template Get<C>();
            }
            if (v_.weight == kFormRows) {
                W = wide_.template Get<C>();
                ExpandRows(W, w, i * tileElems_, len);
            }
            const C one = static_cast<C>(1);
            const C minusOne = static_cast<C>(-1);
            // softplus(-x) = max(-x, 0) + log1p(e), e = exp(-|x|); log1p(e) = ln(u) - ((u - 1) - e) / u, u = 1 + e
            Abs(A, X, n);
            Muls(A, A, minusOne, n);
            Exp(A, A, n);
            Adds(B, A, one, n);
            Adds(D, B, minusOne, n);
            Sub(D, D, A, n);
            Div(D, D, B, n);
            Ln(A, B, n);
            Sub(A, A, D, n);
            Muls(D, X, minusOne, n);
            Maxs(D, D, static_cast<C>(0), n);
            Add(A, A, D, n);
            // sigmoid(x) = 1 / (1 + exp(-x)) (exp overflows to inf below x = -88: 0, as it should)
            Muls(D, X, minusOne, n);
            Exp(D, D, n);
            Adds(D, D, one, n);
            Duplicate(B, one, n);
            Div(D, B, D, n);
            if (v_.posWeight != kFormNone) {  // coef = 1 + (pw - 1) * y; dx = coef * s - pw * y; A = coef * sp
                Adds(B, PW, minusOne, n);
                Mul(B, B, Y, n);
                Adds(B, B, one, n);
                Mul(PW, PW, Y, n);
                Mul(D, D, B, n);
                Sub(D, D, PW, n);
                Mul(A, A, B, n);
            } else {
                Sub(D, D, Y, n);
            }
            Muls(B, Y, minusOne, n);  // + (1 - y) * x: 1 - y first (exact near y = 1, where x - y * x cancels)
            Adds(B, B, one, n);
            Mul(B, B, X, n);
            Add(A, A, B, n);
            if (weightTile) {
                Mul(D, D, W, n);
                Mul(A, A, W, n);
            } else if (v_.weight == kFormScalar) {
                const C wv = static_cast<C>(ScalarToFloat<T>(wValue_));
                Muls(D, D, wv, n);
                Muls(A, A, wv, n);
            }
            if (scale_ != 1.0f) Muls(D, D, static_cast<C>(scale_), n);
            if constexpr (kWiden) {
                Cast(z, D, RoundMode::CAST_RINT, un);
                if (none) Cast(l, A, RoundMode::CAST_RINT, un);
            }
            if (!none) {  // this tile's loss summed; the core's sum accumulates tile by tile, in order
                LocalTensor<float> s = sum_.template Get<float>();
                ReduceSum<float>(s, A, B, n);
                SyncFlag<HardEvent::V_S>();
                partial_ += s.GetValue(0);
            }
            zQue_.EnQue(z);
            if (none) lossQue_.EnQue(l);
            pQue_.FreeTensor(x);
            yQue_.FreeTensor(y);
            if (weightTile) wQue_.FreeTensor(w);
            if (v_.posWeight != kFormNone) pwQue_.FreeTensor(pw);
        }
    }

    /** The fused sum / mean: this core's sum of the loss to its float slot (the host adds the slots in order). */
    __aicore__ inline void WritePartial() {
        LocalTensor<float> s = sum_.template Get<float>();
        s.SetValue(0, partial_);
        SyncFlag<HardEvent::S_MTE3>();
        DataCopyExtParams copy{1, static_cast<uint32_t>(sizeof(float)), 0, 0, 0};
        DataCopyPad(partialGm_, s, copy);
    }

    /**
     * Write row[(start + k) % C] for k < tile + C into this core's workspace region ``dst``. Rows
     * shorter than kSuperElems are first repeated in UB (scalar copies) so small C costs few DMAs;
     * longer rows are copied GM -> UB -> GM in chunks. The stage is a TBuf, so the MTE2/MTE3
     * hand-offs are synchronised by hand.
     */
    __aicore__ inline void WritePeriodicRow(const GlobalTensor<T>& rowGm, int64_t classes, const GlobalTensor<T>& dst) {
        const int64_t need = tileElems_ + classes;
        const int64_t phase = start_ % classes;
        LocalTensor<T> stage = stage_.template Get<T>();
        if (classes < kSuperElems) {
            Load(stage, rowGm, classes);
            SyncFlag<HardEvent::MTE2_S>();
            const int64_t reps = (kSuperElems + classes - 1) / classes;
            const int64_t superLen = reps * classes;
            LocalTensor<T> sup = stage[static_cast<uint32_t>(kSuperElems)];
            for (int64_t k = 0; k < superLen; ++k) {
                sup.SetValue(static_cast<uint32_t>(k), stage.GetValue(static_cast<uint32_t>((phase + k) % classes)));
            }
            SyncFlag<HardEvent::S_MTE3>();
            for (int64_t k = 0; k < need; k += superLen) {
                Store(dst[k], sup, superLen);
            }
        } else {
            int64_t src = phase;
            for (int64_t k = 0; k < need;) {
                int64_t len = classes - src;
                if (len > kStageElems) len = kStageElems;
                if (len > need - k) len = need - k;
                Load(stage, rowGm[src], len);
                SyncFlag<HardEvent::MTE2_MTE3>();
                Store(dst[k], stage, len);
                SyncFlag<HardEvent::MTE3_MTE2>();
                k += len;
                src = (src + len) % classes;
            }
        }
        SyncFlag<HardEvent::MTE3_MTE2>();  // the tiles read the workspace back
    }

    template <HardEvent E> __aicore__ inline void SyncFlag() {
        event_t id = static_cast<event_t>(pipe_->FetchEventID(E));
        SetFlag<E>(id);
        WaitFlag<E>(id);
    }

    TPipe* pipe_ = nullptr;
    TQue<TPosition::VECIN, 1> pQue_, yQue_, gQue_, wQue_, pwQue_;
    TQue<TPosition::VECOUT, 1> zQue_, lossQue_;
    TBuf<TPosition::VECCALC> tmpA_, tmpB_, tmpC_, tmpX_, tmpY_, tmpD_, tmpW_, wide_, stage_, sum_;
    GlobalTensor<T> gradGm_, logitsGm_, labelsGm_, weightGm_, wRowGm_, pwGm_, rowGm_, zGm_, lossGm_;
    GlobalTensor<float> partialGm_;
    Variant v_;
    float scale_ = 1.0f;
    float partial_ = 0.0f;  // the fused sum / mean: this core's sum of the loss so far
    T wValue_{};  // a scalar weight
    int64_t start_ = 0;
    int64_t count_ = 0;
    int64_t tileNum_ = 0;
    int64_t tileElems_ = 0;
    int64_t tailElems_ = 0;
    int64_t classes_ = 0;
    int64_t period_ = 0;  // a last-dim weight's period P or a rows weight's R
};

/** Instantiate the class for the key's BUFFER_NUM (a template parameter) and run it. */
template <typename T>
__aicore__ inline void Run(GM_ADDR grad, GM_ADDR logits, GM_ADDR labels, GM_ADDR weight, GM_ADDR posWeight, GM_ADDR z,
                           GM_ADDR loss, GM_ADDR workspace, const BceGradTilingData& t) {
    const Variant v = DecodeKey(t.tilingKey);
    TPipe pipe;
    if (v.bufferNum == 1) {
        KernelBceGrad<T, 1> op;
        op.Init(grad, logits, labels, weight, posWeight, z, loss, workspace, t, v, &pipe);
        op.Process();
    } else if (v.bufferNum == 2) {
        KernelBceGrad<T, 2> op;
        op.Init(grad, logits, labels, weight, posWeight, z, loss, workspace, t, v, &pipe);
        op.Process();
    } else if (v.bufferNum == 3) {
        KernelBceGrad<T, 3> op;
        op.Init(grad, logits, labels, weight, posWeight, z, loss, workspace, t, v, &pipe);
        op.Process();
    } else if (v.bufferNum == 4) {
        KernelBceGrad<T, 4> op;
        op.Init(grad, logits, labels, weight, posWeight, z, loss, workspace, t, v, &pipe);
        op.Process();
    }
}

}  // namespace bce_grad_kernel

#endif  // BCE_GRAD_KERNEL_H
