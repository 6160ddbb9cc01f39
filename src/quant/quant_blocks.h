/* quant_blocks.h - byte layouts of the quantised block formats (identical to GGUF/ggml).
 *
 * These structs are the on-disk format: a tensor of type T is a plain array of T blocks, so a
 * row of n elements is n / block_size consecutive blocks.  Every struct is packed by nature
 * (only uint8/int8/uint16/int16 members, plus one float at offset 0 of block_q8_K), and the
 * _Static_asserts pin the sizes to the GGUF values.  fp16 fields are stored as raw uint16_t
 * (IEEE binary16) and converted with nx_f16_to_f32().
 *
 * Internal header: included by the quant*.c files and by tests, not by the rest of the engine
 * (which only needs nx_type_traits).
 */
#ifndef NX_QUANT_BLOCKS_H
#define NX_QUANT_BLOCKS_H

#include <stdint.h>

#define NX_QK 32   /* elements per block of the "legacy" formats Q4_0..Q8_1 */
#define NX_QK_K 256 /* elements per super-block of the K formats */
#define NX_K_SCALE_SIZE 12

/* x = d * (q - 8), q in [0, 15]; qs[j] holds element j (low nibble) and j + 16 (high nibble). */
typedef struct { uint16_t d; uint8_t qs[NX_QK / 2]; } nx_block_q4_0;
/* x = d * q + m, q in [0, 15]; same nibble order as q4_0. */
typedef struct { uint16_t d, m; uint8_t qs[NX_QK / 2]; } nx_block_q4_1;
/* x = d * (q - 16), q in [0, 31]; low nibbles as q4_0, bit 4 of element j is bit j of qh
 * (little-endian uint32). */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[NX_QK / 2]; } nx_block_q5_0;
/* x = d * q + m, q in [0, 31]; bits as q5_0. */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[NX_QK / 2]; } nx_block_q5_1;
/* x = d * q. */
typedef struct { uint16_t d; int8_t qs[NX_QK]; } nx_block_q8_0;
/* x = d * q; s = d * sum(q) (fp16), used by the q4_1 / q5_1 dots for the min term. */
typedef struct { uint16_t d, s; int8_t qs[NX_QK]; } nx_block_q8_1;

/* 16 sub-blocks of 16: x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4), q in [0, 3],
 * j = element / 16.  qs: for each half h of 128 elements, bits 2k..2k+1 of qs[32h + l] hold
 * element 128h + 32k + l (k < 4, l < 32). */
typedef struct { uint8_t scales[NX_QK_K / 16]; uint8_t qs[NX_QK_K / 4]; uint16_t d, dmin; } nx_block_q2_K;
/* 16 sub-blocks of 16: x = d * (s_j - 32) * (q - 4), q in [0, 7], s_j 6-bit (see
 * nx_q3_unpack_scales).  Low two bits of q as q2_K's qs; bit 2 of element e is bit e / 32 of
 * hmask[e % 32]. */
typedef struct { uint8_t hmask[NX_QK_K / 8]; uint8_t qs[NX_QK_K / 4]; uint8_t scales[12]; uint16_t d; } nx_block_q3_K;
/* Non-linear 4-bit: x = d * nx_iq4nl_values[q], q in [0, 15]; nibbles as q4_0 (element j low,
 * j + 16 high nibble of qs[j]). */
typedef struct { uint16_t d; uint8_t qs[NX_QK / 2]; } nx_block_iq4_nl;
/* 8 sub-blocks of 32: x = d * (ls_j - 32) * nx_iq4nl_values[q]; ls_j 6-bit = low nibble j % 2
 * of scales_l[j / 2] | bits 2j..2j+1 of scales_h << 4.  qs[16j .. 16j + 15] holds sub-block j
 * as an iq4_nl block does. */
typedef struct { uint16_t d; uint16_t scales_h; uint8_t scales_l[NX_QK_K / 64]; uint8_t qs[NX_QK_K / 2]; } nx_block_iq4_xs;

/* 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], q in [0, 15], sc/m 6-bit packed in
 * scales[12] (see nx_k4_scale_min).  qs: for each group of 64 elements g, 32 bytes whose low
 * nibbles are elements g..g+31 and high nibbles g+32..g+63. */
typedef struct { uint16_t d, dmin; uint8_t scales[NX_K_SCALE_SIZE]; uint8_t qs[NX_QK_K / 2]; } nx_block_q4_K;
/* As q4_K with a fifth bit: bit 4 of element g*64 + l (l < 32) is bit 2g of qh[l], of element
 * g*64 + 32 + l is bit 2g+1 of qh[l]. */
typedef struct {
    uint16_t d, dmin;
    uint8_t scales[NX_K_SCALE_SIZE];
    uint8_t qh[NX_QK_K / 8];
    uint8_t qs[NX_QK_K / 2];
} nx_block_q5_K;
/* 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q in [0, 63].  For each half h of 128
 * elements: ql[64h + l] low nibble = low 4 bits of element 128h + l, high nibble = element
 * 128h + 64 + l; ql[64h + 32 + l] likewise for elements +32 / +96; qh[32h + l] bits 2k..2k+1
 * = high 2 bits of element 128h + 32k + l. */
typedef struct {
    uint8_t ql[NX_QK_K / 2];
    uint8_t qh[NX_QK_K / 4];
    int8_t scales[NX_QK_K / 16];
    uint16_t d;
} nx_block_q6_K;
/* Activation format of the K dots: x = d * q, plus sums of q over each group of 16. */
typedef struct { float d; int8_t qs[NX_QK_K]; int16_t bsums[NX_QK_K / 16]; } nx_block_q8_K;

_Static_assert(sizeof(nx_block_q4_0) == 18, "q4_0 block size");
_Static_assert(sizeof(nx_block_q4_1) == 20, "q4_1 block size");
_Static_assert(sizeof(nx_block_q5_0) == 22, "q5_0 block size");
_Static_assert(sizeof(nx_block_q5_1) == 24, "q5_1 block size");
_Static_assert(sizeof(nx_block_q8_0) == 34, "q8_0 block size");
_Static_assert(sizeof(nx_block_q8_1) == 36, "q8_1 block size");
_Static_assert(sizeof(nx_block_q2_K) == 84, "q2_K block size");
_Static_assert(sizeof(nx_block_q3_K) == 110, "q3_K block size");
_Static_assert(sizeof(nx_block_q4_K) == 144, "q4_K block size");
_Static_assert(sizeof(nx_block_q5_K) == 176, "q5_K block size");
_Static_assert(sizeof(nx_block_q6_K) == 210, "q6_K block size");
_Static_assert(sizeof(nx_block_q8_K) == 292, "q8_K block size");
_Static_assert(sizeof(nx_block_iq4_nl) == 18, "iq4_nl block size");
_Static_assert(sizeof(nx_block_iq4_xs) == 136, "iq4_xs block size");

/* The 16 values of the iq4_nl / iq4_xs codes (GGUF's kvalues_iq4nl). */
static const int8_t nx_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The 16 scales of a q3_K block, s_j in [0, 63] (value s_j - 32): bits 0..3 are the low
 * (j < 8) or high (j >= 8) nibble of scales[j % 8], bits 4..5 are bits 2(j / 4)..2(j / 4)+1 of
 * scales[8 + j % 4]. */
static inline void nx_q3_unpack_scales(const uint8_t *scales, uint8_t s[16]) {
    uint32_t a, b, c, t;
    __builtin_memcpy(&a, scales, 4);
    __builtin_memcpy(&b, scales + 4, 4);
    __builtin_memcpy(&c, scales + 8, 4);
    t = (a & 0x0F0F0F0Fu) | ((c & 0x03030303u) << 4);
    __builtin_memcpy(s, &t, 4);
    t = (b & 0x0F0F0F0Fu) | (((c >> 2) & 0x03030303u) << 4);
    __builtin_memcpy(s + 4, &t, 4);
    t = ((a >> 4) & 0x0F0F0F0Fu) | (((c >> 4) & 0x03030303u) << 4);
    __builtin_memcpy(s + 8, &t, 4);
    t = ((b >> 4) & 0x0F0F0F0Fu) | (((c >> 6) & 0x03030303u) << 4);
    __builtin_memcpy(s + 12, &t, 4);
}

/* The 6-bit scale and min of sub-block j (0..7) of a q4_K / q5_K block: for j < 4 the low 6
 * bits of bytes j and j+4; for j >= 4 the nibbles of byte j+4 with the top two bits taken from
 * bytes j-4 (scale) and j (min). */
static inline void nx_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* All eight scales and mins of a q4_K / q5_K block at once (same values as nx_k4_scale_min),
 * working on the three little-endian 32-bit words of scales[12] (a = bytes 0..3, b = 4..7,
 * c = 8..11): sc[0..3] = a & 63, m[0..3] = b & 63, sc[4..7] = low nibbles of c with the top
 * two bits of a's bytes as bits 4..5, m[4..7] = high nibbles of c with b's top bits. */
static inline void nx_k4_unpack_scales(const uint8_t *scales, uint8_t sc[8], uint8_t m[8]) {
    uint32_t a, b, c, t;
    __builtin_memcpy(&a, scales, 4);
    __builtin_memcpy(&b, scales + 4, 4);
    __builtin_memcpy(&c, scales + 8, 4);
    t = a & 0x3F3F3F3Fu;
    __builtin_memcpy(sc, &t, 4);
    t = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
    __builtin_memcpy(sc + 4, &t, 4);
    t = b & 0x3F3F3F3Fu;
    __builtin_memcpy(m, &t, 4);
    t = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
    __builtin_memcpy(m + 4, &t, 4);
}

#endif
