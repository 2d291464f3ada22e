/**
 * How a tiling's elements fall on cores and tiles: the one implementation of the core split and the tile
 * counts. The host tiling fills the struct with it (bce_grad_tiling_core.h), the cost model reads its core
 * kinds through it (bce_grad_cost_model.h KindsOf, WidestOf), and Python asks the same code through the
 * engine binding (tiling_model.tiling, plan and cost), so the service, the tuner and the build cannot split
 * a launch differently.
 *
 * The exact scheme: n elements in blocks of blockElems over at most coreNum cores; cores below tailBlocks
 * take one block more (big), the others `every` blocks (small), and the last core (cores - 1) is cut to end
 * at element n - 1. The kernel's Init reads a struct the same way (RunsOf): that is the reading the seed
 * scheme's struct gets too.
 */
#ifndef BCE_GRAD_CORE_SPLIT_H
#define BCE_GRAD_CORE_SPLIT_H

#include <cstdint>
#include <cstring>

#include "bce_grad_tiling_data.h"

namespace bce_grad {

/** ceil(a / b) for a >= 0, b > 0, without overflowing near INT64_MAX. */
inline int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

/** count elements in tiles of tileElems: how many tiles (the last one partial) and the last one's elements;
 *  (0, 0) when there is nothing to tile. */
inline void Tiles(int64_t count, int64_t tileElems, int64_t* num, int64_t* tail) {
    if (count <= 0) {
        *num = 0;
        *tail = 0;
        return;
    }
    *num = CeilDiv(count, tileElems);
    *tail = count - (*num - 1) * tileElems;
}

/** Where a launch's elements go, core by core: cores run; the first tailBlocks are big (big elements
 *  each), then small ones (small each); the last core, cores - 1, takes `last`. */
struct CoreSplit {
    int64_t cores;
    int64_t tailBlocks;
    int64_t small;
    int64_t big;
    int64_t last;
};

/** The exact scheme's split of n > 0 elements (blocks of blockElems, at most coreNum >= 1 cores). */
inline CoreSplit SplitCores(int64_t n, int64_t blockElems, int64_t coreNum) {
    const int64_t blocks = CeilDiv(n, blockElems);
    CoreSplit s;
    s.cores = coreNum < blocks ? coreNum : blocks;
    if (s.cores < 1) s.cores = 1;
    const int64_t every = blocks / s.cores;
    s.tailBlocks = blocks - every * s.cores;
    s.small = every * blockElems;
    s.big = s.small + blockElems;
    s.last = n - (s.big * s.tailBlocks + s.small * (s.cores - 1 - s.tailBlocks));
    return s;
}

/** The split a struct describes (any scheme) for blockDim cores. */
inline CoreSplit SplitOf(const BceGradTilingData& f, int64_t blockDim) {
    return CoreSplit{blockDim, f.tailBlockNum, f.smallCoreDataNum, f.bigCoreDataNum, f.lastCoreDataNum};
}

/** The exact scheme's counting fields of the struct: the split, tiles of tileBytes and their tails, n. The
 *  rest of the struct (reduction, scale, operands' periods, key) is the caller's. Returns the block dim
 *  (0 when n is 0, and then the counting fields are 0 but the tile size). */
inline int64_t SplitFields(int64_t n, int64_t elem, int64_t blockBytes, int64_t tileBytes, int64_t coreNum,
                           BceGradTilingData* f) {
    const int64_t tileElems = tileBytes / elem;
    f->tileDataNum = tileElems;
    if (n <= 0) return 0;
    const CoreSplit s = SplitCores(n, blockBytes / elem, coreNum);
    f->totalLength = n;
    f->smallCoreDataNum = s.small;
    f->bigCoreDataNum = s.big;
    Tiles(s.small, tileElems, &f->finalSmallTileNum, &f->smallTailDataNum);
    Tiles(s.big, tileElems, &f->finalBigTileNum, &f->bigTailDataNum);
    f->tailBlockNum = s.tailBlocks;
    f->lastCoreDataNum = s.last;
    Tiles(s.last, tileElems, &f->lastCoreTileNum, &f->lastCoreTailDataNum);
    return s.cores;
}

/** `cores` consecutive cores from core `first` doing the same work: the first starts at element `start`,
 *  each takes `count` elements (the next starts `count` later). */
struct CoreRun {
    int64_t first;
    int64_t cores;
    int64_t start;
    int64_t count;
};

constexpr int kBigRun = 0, kSmallRun = 1, kLastRun = 2;

/** A split as the kernel's Init reads it, as three runs in core order: the big cores (below tailBlocks),
 *  the small ones, the last core (cores - 1, whatever its index says). A run with no core has cores 0 and
 *  count 0. */
inline void RunsOf(const CoreSplit& s, CoreRun runs[3]) {
    std::memset(runs, 0, 3 * sizeof(CoreRun));
    if (s.cores <= 0) return;
    const int64_t last = s.cores - 1;
    const int64_t big = s.tailBlocks < last ? s.tailBlocks : last;
    const int64_t small = last - s.tailBlocks > 0 ? last - s.tailBlocks : 0;
    const int64_t smallStart = s.big * s.tailBlocks;
    runs[kBigRun] = CoreRun{0, big, 0, big > 0 ? s.big : 0};
    runs[kSmallRun] = CoreRun{s.tailBlocks, small, smallStart, small > 0 ? s.small : 0};
    const int64_t lastStart = last < s.tailBlocks ? s.big * last : smallStart + s.small * (last - s.tailBlocks);
    runs[kLastRun] = CoreRun{last, 1, lastStart, s.last};
}

/** Every copy of a run starts on `align` bytes: its first core's start and, with more than one core, the
 *  stride between them (the tile stride is the caller's to check). */
inline bool RunStartsAligned(const CoreRun& r, int64_t elem, int64_t align) {
    return r.cores <= 0 || ((r.start * elem) % align == 0 && (r.cores <= 1 || (r.count * elem) % align == 0));
}

}  // namespace bce_grad

#endif  // BCE_GRAD_CORE_SPLIT_H
