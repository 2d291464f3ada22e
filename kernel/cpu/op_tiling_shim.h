/**
 * The twin's stand-in for what a CANN custom-op (msopgen) build generates for a kernel that
 * registers its tiling struct with REGISTER_TILING_DEFAULT: GET_TILING_DATA_WITH_STRUCT declares the
 * struct and byte-copies it from the GM tiling argument. The op compiler force-includes its
 * generated header; the twin force-includes this one in its custom-op flow only. The kernel-launch
 * flow gets nothing of the kind, in CANN and in the twin.
 */
#ifndef BCE_TWIN_OP_TILING_SHIM_H
#define BCE_TWIN_OP_TILING_SHIM_H

#include <cstring>

#include "twin_runtime.h"

namespace twin {

inline void ReadTilingStruct(void* dst, size_t bytes, const void* src) {
    CheckGm(FindRegion(src), src, bytes, 8, "GET_TILING_DATA_WITH_STRUCT", false);
    std::memcpy(dst, src, bytes);
}

}  // namespace twin

#define GET_TILING_DATA_WITH_STRUCT(tiling_struct, tiling_data, tiling_arg) \
    tiling_struct tiling_data;                                              \
    ::twin::ReadTilingStruct(&tiling_data, sizeof(tiling_struct), tiling_arg)

#endif  // BCE_TWIN_OP_TILING_SHIM_H
