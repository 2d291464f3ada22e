/**
 * The realised-tiling classes a device's learned residual prices (tiling_model/residual.py fits one log
 * factor per level): what the knobs make of a size, each feature a small table of levels. One source: Python
 * reads the levels through the engine binding (_engine.residual_levels), the engine's prediction and the
 * exported header will read them here.
 */
#ifndef BCE_GRAD_RESIDUAL_H
#define BCE_GRAD_RESIDUAL_H

#include <cstdint>

#include "bce_grad_cost_model.h"

namespace bce_grad {
namespace residual {

constexpr int kBuffers = 5;          // BUFFER_NUM 0 .. 4
constexpr int kTileSizeClasses = 19;  // log2 of the tile's bytes, to 256 KiB
constexpr int kPageSteps = 16;        // a copy's bytes within an 8 KiB page, in 512-B steps
constexpr int kTilesBins = 20;        // tiles per core: each count to 16, then to 24, 32, 48, 64
constexpr int kTilesLevels = kTilesBins + 1;
constexpr int64_t kTilesBinTop[kTilesBins] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 32, 48, 64};

enum Feature : int {
    kBufferNum,
    kBlockClass,
    kCores,
    kCoresOddXBuffers,
    kTileAlign,
    kTileAlignXBuffers,
    kTileInPageXBuffers,
    kTileSize,
    kTileSizeXBuffers,
    kTailAlign,
    kTailAlignXTiles,
    kTilesXBuffers,
    kCoreBoundsAlignedXBuffers,
    kStructure,
    kFeatures
};

/** Levels of each feature, in Feature order (the factor tables' sizes). */
constexpr int kLevels[kFeatures] = {
    kBuffers,      16, 65, 2 * kBuffers, 5, 5 * kBuffers, kPageSteps * kBuffers, kTileSizeClasses,
    kTileSizeClasses * kBuffers, 5, 5 * kTilesLevels, kTilesLevels * kBuffers, 2 * kBuffers, 4};
constexpr const char* kNames[kFeatures] = {
    "buffer_num", "block_class", "cores", "cores_odd_x_buffers", "tile_align", "tile_align_x_buffers",
    "tile_in_page_x_buffers", "tile_size", "tile_size_x_buffers", "tail_align", "tail_align_x_tiles",
    "tiles_x_buffers", "core_bounds_aligned_x_buffers", "structure"};

inline int64_t Clamp(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

/** floor(log2(v)) for v >= 1 (0 below). */
inline int64_t Log2Floor(int64_t v) {
    int64_t c = 0;
    while (v > 1) {
        v >>= 1;
        ++c;
    }
    return c;
}

/** The largest of grains[0..count) dividing bytes, as its index + 1 (0: none divides). */
inline int64_t AlignLevel(int64_t bytes, const int64_t* grains, int count) {
    int64_t level = 0;
    for (int i = 0; i < count; ++i) {
        if (bytes % grains[i] == 0) level = i + 1;
    }
    return level;
}

/** The tiles-per-core bin: each count to 16 its own, then 17-24, 25-32, 33-48, 49-64, more. */
inline int64_t TilesBin(int64_t tiles) {
    for (int i = 0; i < kTilesBins; ++i) {
        if (tiles <= kTilesBinTop[i]) return i;
    }
    return kTilesBins;
}

/** Every feature's level of one exact-scheme configuration whose kinds are k (elem bytes per element). */
inline void LevelsOf(const cost::Kinds& k, int64_t elem, int64_t block, int64_t bn, int64_t tile, int64_t* out) {
    static const int64_t kTileGrains[4] = {1024, 2048, 4096, 8192};
    static const int64_t kTailGrains[4] = {32, 512, 2048, 8192};
    const int64_t b = Clamp(bn, 0, kBuffers - 1);
    int slowest = 0;  // the kind with most tiles among those with cores (the first on a tie)
    int64_t most = -1;
    bool aligned = true;
    for (int i = 0; i < 3; ++i) {
        const int64_t t = k.counts[i] > 0 ? k.tiles[i] : -1;
        if (t > most) {
            most = t;
            slowest = i;
        }
        if (k.counts[i] > 0 && !k.aligned[i]) aligned = false;
    }
    const int64_t tiles = most > 0 ? most : 0;
    const int64_t tailBytes = k.tail[slowest] * elem;
    const int64_t tileAlign = AlignLevel(tile, kTileGrains, 4);
    const int64_t size = Clamp(Log2Floor(tile), 0, kTileSizeClasses - 1);
    const int64_t tilesBin = TilesBin(tiles);
    const int64_t tailAlign = AlignLevel(tailBytes, kTailGrains, 4);
    out[kBufferNum] = b;
    out[kBlockClass] = Clamp(Log2Floor(block), 0, 15);
    out[kCores] = Clamp(k.cores, 0, 64);
    out[kCoresOddXBuffers] = (k.cores % 2) * kBuffers + b;
    out[kTileAlign] = tileAlign;
    out[kTileAlignXBuffers] = tileAlign * kBuffers + b;
    out[kTileInPageXBuffers] = ((tile % 8192) / 512) * kBuffers + b;
    out[kTileSize] = size;
    out[kTileSizeXBuffers] = size * kBuffers + b;
    out[kTailAlign] = tailAlign;
    out[kTailAlignXTiles] = tailAlign * kTilesLevels + tilesBin;
    out[kTilesXBuffers] = tilesBin * kBuffers + b;
    out[kCoreBoundsAlignedXBuffers] = (aligned ? 1 : 0) * kBuffers + b;
    out[kStructure] = (k.counts[1] > 0 ? 2 : 0) + (k.counts[2] > 0 ? 1 : 0);
}

}  // namespace residual
}  // namespace bce_grad

#endif  // BCE_GRAD_RESIDUAL_H
