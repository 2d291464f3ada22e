/**
 * What the build ships: the tuned knobs of a call (bce_grad_tuned_table.h, generated from the
 * service's tables) and, at a size the tables were not tuned at, the service's unseen-size policy:
 * keep the bucket's BUFFER_NUM, re-fit the block size, core count and tile with the cost model at the
 * exact size (bce_grad_refit.h over bce_grad_cost_model.h); with a device's table (a learned correction or residual: cost::Learned)
 * choose the BUFFER_NUM too (cost::RefitAcross). So the compiled operator tiles every call as `POST /tiling`
 * answers it (tests/kernel/test_tuned_header.py: the same knobs on thousands of random sizes per SoC).
 *
 * Pure C++17, no CANN headers, no heap allocation: the TilingFunc (bce_grad_tiling.cpp) calls TunedTiling.
 */
#ifndef BCE_GRAD_TUNED_TILING_H
#define BCE_GRAD_TUNED_TILING_H

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <mutex>
#include <tuple>

#include "bce_grad_cost_model.h"
#include "bce_grad_refit.h"
#include "bce_grad_tiling_core.h"
#include "bce_grad_tuned_table.h"

namespace bce_grad {

/** The tuned SoC of this name (index into tuned::kSocs), or -1. */
inline int64_t TunedSocIndex(const char* soc) {
    for (size_t i = 0; i < std::size(tuned::kSocs); ++i) {
        if (std::strcmp(tuned::kSocs[i].name, soc) == 0) return static_cast<int64_t>(i);
    }
    return -1;
}

/** The SoC's entries of this variant, or nullptr (an untuned SoC or variant). */
inline const tuned::VariantRange* TunedVariant(int64_t socIndex, const Variant& v) {
    const tuned::VariantRange want{socIndex, static_cast<int64_t>(v.dtype), static_cast<int64_t>(v.reduction),
                                   static_cast<int64_t>(v.weight), static_cast<int64_t>(v.posWeight),
                                   static_cast<int64_t>(v.wrt), static_cast<int64_t>(v.mode), 0, 0, 0, 0};
    auto key = [](const tuned::VariantRange& r) {
        return std::make_tuple(r.soc, r.dtype, r.reduction, r.weight, r.posWeight, r.wrt, r.mode);
    };
    const tuned::VariantRange* end = std::end(tuned::kVariants);
    const tuned::VariantRange* it = std::lower_bound(
        std::begin(tuned::kVariants), end, want,
        [&](const tuned::VariantRange& a, const tuned::VariantRange& b) { return key(a) < key(b); });
    return it != end && key(*it) == key(want) ? it : nullptr;
}

/** The entry of a variant's range whose size bucket holds n (n >= 1): a binary search over the limits. */
inline const tuned::Entry* EntryFor(const tuned::VariantRange& r, int64_t n) {
    const tuned::Entry* first = tuned::kEntries + r.first;
    const tuned::Entry* last = first + r.count;  // limits rise with size; the last entry has none (0)
    return std::partition_point(first, last, [n](const tuned::Entry& e) { return e.limit != 0 && n >= e.limit; });
}

/** The entry whose size bucket holds n, or nullptr (n == 0, untuned SoC or variant). */
inline const tuned::Entry* LookupTuned(const char* soc, const Variant& v, int64_t n) {
    if (n <= 0) return nullptr;
    const tuned::VariantRange* r = TunedVariant(TunedSocIndex(soc), v);
    return r == nullptr ? nullptr : EntryFor(*r, n);
}

/** The kernel's queues allow this BUFFER_NUM (cost::QueueLimitAllows, the one queue limit). */
inline bool BufferNumAllowed(const cost::KernelModel& k, int64_t bufferNum) {
    return cost::QueueLimitAllows(cost::VecinQueues(k.fullInputs, k.scalarQueueBytes), k.outputs, bufferNum);
}

/**
 * The knobs the build uses for n elements: the tuned entry's where it was tuned at n; at any other
 * size, or for a weight form served from the full weight's entries (seeded), its BUFFER_NUM with the
 * block size, core count and tile the model finds fastest at n (the service's policy, pick.refit), or,
 * where the SoC's model was fitted on a device, the fastest of every allowed BUFFER_NUM (cost::RefitAcross:
 * the likeliest first, its best bounding the others); the entry's own knobs if no tile fits (or the entry's
 * BUFFER_NUM is not allowed); the scheme's defaults (all 0) where no entry applies. refitted says whether
 * the model chose.
 */
inline Knobs TunedKnobs(const char* soc, int64_t n, const Variant& v, const Platform& p, bool* refitted = nullptr,
                        cost::RefitStats* stats = nullptr) {
    Knobs k;
    if (refitted) *refitted = false;
    const int64_t socIndex = TunedSocIndex(soc);
    const tuned::VariantRange* r = n > 0 ? TunedVariant(socIndex, v) : nullptr;
    if (r == nullptr) return k;
    const tuned::Entry* e = EntryFor(*r, n);
    k.blockBytes = e->blockBytes;
    k.bufferNum = e->bufferNum;
    k.tileBytes = e->tileBytes;
    k.coreNum = e->coreNum;
    const cost::KernelModel km = cost::WithRowLen(tuned::kKernels[r->kernel], v.weightPeriod);
    if ((e->size == n && !r->seeded) || !BufferNumAllowed(km, e->bufferNum)) return k;
    BufferPlan plan;
    const char* err = nullptr;
    if (MakePlan(v, Scheme::Exact, &plan, &err) != Status::Ok) return k;
    // the bucket's BUFFER_NUM; with a device's table (cost::Learned) every allowed one after it (pick.refit_tiling)
    const cost::SocModel& model = tuned::kSocs[socIndex];
    cost::RefitSlice slices[std::size(cost::kBufferChoices) + 1];
    int count = 0;
    for (int i = -1; i < static_cast<int>(std::size(cost::kBufferChoices)); ++i) {
        const int64_t bn = i < 0 ? e->bufferNum : cost::kBufferChoices[i];
        if (i >= 0 && (!cost::Learned(model) || bn == e->bufferNum || !BufferNumAllowed(km, bn))) continue;
        const int64_t top = plan.MaxTileBytes(p.ubBytes - p.ubReserveBytes, bn);
        slices[count++] = cost::RefitSlice{bn, top / cost::kTileStepBytes * cost::kTileStepBytes};
    }
    const cost::RefitPick c =
        cost::RefitAcross(n, tuned::kBlockChoices, static_cast<int>(std::size(tuned::kBlockChoices)), slices, count,
                          p.aivCores, km, model, e->blockBytes, e->tileBytes, e->coreNum, stats);
    if (c.bufferNum > 0) {
        k.blockBytes = c.choice.blockBytes;
        k.bufferNum = c.bufferNum;
        k.tileBytes = c.choice.tileBytes;
        k.coreNum = c.choice.coreNum;
        if (refitted) *refitted = true;
    }
    return k;
}

/**
 * TunedKnobs, remembered per process: a training loop calls the TilingFunc with the same shapes every
 * step, and a re-fit costs microseconds where a lookup costs tens of nanoseconds. Direct-mapped (a
 * colliding call replaces the slot), fixed size, no allocation; a mutex makes it safe for the
 * concurrent TilingFunc calls of a multi-threaded graph build.
 */
class KnobCache {
public:
    static constexpr size_t kSlots = 512;

    Knobs Get(const char* soc, int64_t n, const Variant& v, const Platform& p) {
        const int64_t key[12] = {TunedSocIndex(soc), n, static_cast<int64_t>(v.dtype), static_cast<int64_t>(v.reduction),
                                 static_cast<int64_t>(v.weight), static_cast<int64_t>(v.posWeight), static_cast<int64_t>(v.wrt),
                                 static_cast<int64_t>(v.mode), v.weight == Form::Rows ? v.weightPeriod : 0, p.ubBytes,
                                 p.ubReserveBytes, p.aivCores};
        uint64_t h = 1469598103934665603ull;  // FNV-1a over the key's words
        for (int64_t w : key) h = (h ^ static_cast<uint64_t>(w)) * 1099511628211ull;
        Slot& slot = slots_[h % kSlots];
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (slot.used && std::memcmp(slot.key, key, sizeof key) == 0) return slot.knobs;
        }
        const Knobs k = TunedKnobs(soc, n, v, p);  // outside the lock: a re-fit may take a while
        std::lock_guard<std::mutex> lock(mutex_);
        std::memcpy(slot.key, key, sizeof key);
        slot.knobs = k;
        slot.used = true;
        return k;
    }

private:
    struct Slot {
        int64_t key[12];
        Knobs knobs;
        bool used = false;
    };
    std::mutex mutex_;
    Slot slots_[kSlots];
};

/** The process's KnobCache (constructed on first use, thread-safe). */
inline KnobCache& TunedKnobCache() {
    static KnobCache cache;
    return cache;
}

/** The tiling of n elements with TunedKnobs (exact scheme), through the process's KnobCache. */
inline Status TunedTiling(const char* soc, int64_t n, const Variant& v, const Platform& p, TilingResult* out,
                          const char** err) {
    return ComputeTiling(n, v, TunedKnobCache().Get(soc, n, v, p), p, Scheme::Exact, out, err);
}

}  // namespace bce_grad

#endif  // BCE_GRAD_TUNED_TILING_H
