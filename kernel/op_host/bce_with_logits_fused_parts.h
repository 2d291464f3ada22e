/**
 * BceWithLogitsFused's loss for sum and mean: one float32 slot per core, at most kLossParts of them (no A2 SoC
 * has more vector cores). Slots past the launch's block dim stay 0 (the output's InitValue), so the loss is the
 * slots added in order. The infershape and the TilingFunc agree on the count through this header.
 */
#ifndef BCE_WITH_LOGITS_FUSED_PARTS_H
#define BCE_WITH_LOGITS_FUSED_PARTS_H

#include <cstdint>

namespace bce_grad_host {

constexpr int64_t kLossParts = 64;

}  // namespace bce_grad_host

#endif  // BCE_WITH_LOGITS_FUSED_PARTS_H
