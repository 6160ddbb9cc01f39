/* quant_half.c - the half-precision conversions (IEEE binary16 and bfloat16, round-to-nearest-even
 * like ggml; quant.h), used by the block formats' scales, the F16/BF16 types, the KV cache and the
 * converter.  Integer bit operations only (the one float multiply, a subnormal's mant * 2^-24, is
 * exact), so the result does not depend on the compiler's floating-point settings.
 */
#include "quant/quant.h"

#include <string.h>

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float nx_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float */
        float v = (float)mant * 0x1p-24f;
        return f32_from_bits(f32_bits(v) | sign);
    }
    if (exp == 31) {
        /* inf, or NaN (made quiet, as a float multiply would) */
        uint32_t bits = sign | 0x7F800000u | (mant << 13);
        if (mant) bits |= 0x00400000u;
        return f32_from_bits(bits);
    }
    return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

/* Round to nearest, ties to even; overflow -> inf; NaN -> quiet NaN 0x7E00 (with sign). */
uint16_t nx_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t a = x & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00u;
    /* 65520 = halfway between the largest half (65504) and 65536; ties-to-even goes up */
    if (a >= 0x477FF000u) return sign | 0x7C00u;
    if (a < 0x38800000u) {
        /* result is a half subnormal (or zero): round mant * 2^(e-126) to an integer number
         * of 2^-24 units */
        uint32_t e = a >> 23;
        if (e < 102) return sign; /* below 2^-25: rounds to zero */
        uint32_t mant = (a & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126 - e; /* 14..24 */
        uint32_t q = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1))) q++;
        return sign | (uint16_t)q; /* q == 0x400 is correctly the smallest normal */
    }
    /* normal: rebias the exponent and round away the low 13 mantissa bits; a carry into the
     * exponent is the correct result */
    uint32_t r = a + 0xFFFu + ((a >> 13) & 1u);
    return sign | (uint16_t)((r - (112u << 23)) >> 13);
}

float nx_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

/* Round to nearest, ties to even; NaN stays NaN (forced quiet); subnormals kept. */
uint16_t nx_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((x >> 16) | 0x40u);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}
