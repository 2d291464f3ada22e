/**
 * CPU twin: the 16-bit float types the NPU compiler provides as built-ins.
 *
 * As in tikicpulib: `half` is a 16-bit storage struct in the global namespace with implicit
 * float conversions; `bfloat16_t` is `bfloat16::Bf16T`. Conversions from float round to
 * nearest even (what Cast with CAST_RINT/CAST_NONE does on A2); `RoundTo16` implements the
 * other A2 rounding modes for the vector Cast.
 */
#ifndef BCE_TWIN_TYPES_H
#define BCE_TWIN_TYPES_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace twin16 {

inline uint32_t FloatBits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    return u;
}

inline float BitsFloat(uint32_t u) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
}

/** IEEE binary16 -> float (exact). */
inline float HalfToFloat(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t man = h & 0x3FFu;
    if (exp == 0x1Fu) return BitsFloat(sign | 0x7F800000u | (man << 13));  // inf / nan
    if (exp == 0) {
        if (man == 0) return BitsFloat(sign);
        float v = std::ldexp(static_cast<float>(man), -24);  // subnormal: man * 2^-24, exact
        return sign ? -v : v;
    }
    return BitsFloat(sign | ((exp + 112u) << 23) | (man << 13));
}

/** float -> binary16, round to nearest even, overflow to inf (the scalar conversion). */
inline uint16_t FloatToHalfRne(float f) {
    uint32_t x = FloatBits(f);
    uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    uint32_t absx = x & 0x7FFFFFFFu;
    if (absx >= 0x7F800000u) return sign | (absx > 0x7F800000u ? 0x7E00u : 0x7C00u);
    if (absx >= 0x477FF000u) return sign | 0x7C00u;  // rounds to >= 65520 -> inf
    if (absx < 0x38800000u) {                        // below the smallest normal half: subnormal
        float a = BitsFloat(absx);
        float scaled = a * 16777216.0f;  // a / 2^-24, exact (power of two)
        float r = std::nearbyint(scaled);  // FE_TONEAREST: ties to even
        return sign | static_cast<uint16_t>(r);
    }
    uint32_t man = absx & 0x7FFFFFu;
    uint32_t exp = (absx >> 23) - 112u;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1FFFu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return sign | static_cast<uint16_t>(h);
}

inline float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

inline uint16_t FloatToBf16Rne(float f) {
    uint32_t x = FloatBits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
    x += 0x7FFFu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

}  // namespace twin16

struct half {
    uint16_t val = 0;
    half() = default;
    half(float f) : val(twin16::FloatToHalfRne(f)) {}
    half(double d) : val(twin16::FloatToHalfRne(static_cast<float>(d))) {}
    half(int32_t i) : val(twin16::FloatToHalfRne(static_cast<float>(i))) {}
    half(int16_t i) : val(twin16::FloatToHalfRne(static_cast<float>(i))) {}
    half(uint32_t i) : val(twin16::FloatToHalfRne(static_cast<float>(i))) {}
    operator float() const { return twin16::HalfToFloat(val); }
    static half FromBits(uint16_t b) {
        half h;
        h.val = b;
        return h;
    }
};

namespace bfloat16 {
struct Bf16T {
    uint16_t val = 0;
    Bf16T() = default;
    Bf16T(const float& f) : val(twin16::FloatToBf16Rne(f)) {}
    operator float() const { return twin16::Bf16ToFloat(val); }
    static Bf16T FromBits(uint16_t b) {
        Bf16T h;
        h.val = b;
        return h;
    }
};
}  // namespace bfloat16
using bfloat16_t = bfloat16::Bf16T;

#endif  // BCE_TWIN_TYPES_H
