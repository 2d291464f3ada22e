/**
 * Tiling struct of the BinaryCrossEntropyGrad kernel, shared by the host tiling and the kernel.
 *
 * All fields are int64 and laid out in this order; the host serialises them little-endian
 * (tiling_model.TilingData.to_bytes). The first ten fields are the requirement's, the last
 * seven are bcetune's: the last core is cut to end at element n-1 (no access past the tensors),
 * the grad scale (1/N for mean) is computed on the host in float, as IEEE-754 bits, and the
 * tiling key travels in the struct so one kernel binary dispatches on it (dtype, BUFFER_NUM,
 * reduction and variant digits; see bce_grad::TilingKey).
 */
#ifndef BCE_GRAD_TILING_DATA_H
#define BCE_GRAD_TILING_DATA_H

#include <cstdint>

struct BceGradTilingData {
    int64_t totalLength;          // N, elements of each full tensor
    int64_t smallCoreDataNum;     // elements per small core
    int64_t bigCoreDataNum;       // elements per big core (one block more)
    int64_t finalBigTileNum;      // tiles per big core, tail included
    int64_t finalSmallTileNum;    // tiles per small core, tail included
    int64_t tileDataNum;          // elements per full tile
    int64_t smallTailDataNum;     // elements in a small core's last tile
    int64_t bigTailDataNum;       // elements in a big core's last tile
    int64_t tailBlockNum;         // cores [0, tailBlockNum) are big cores
    int64_t reduction;            // 0 none, 1 sum, 2 mean
    int64_t lastCoreDataNum;      // elements of core blockDim-1
    int64_t lastCoreTileNum;      // its tiles, tail included
    int64_t lastCoreTailDataNum;  // elements in its last tile
    int64_t scaleBits;            // float32 bits of the grad scale
    int64_t posWeightClasses;     // C of a last-dim pos_weight [C], else 0
    int64_t tilingKey;            // decimal digits: schMode, dtype, weight form, BUFFER_NUM, pos_weight form, wrt
    int64_t weightPeriod;         // a broadcast weight's P (last_dim) or R (rows), else 0
};

#endif  // BCE_GRAD_TILING_DATA_H
