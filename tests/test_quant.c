/* test_quant.c - the type table, half-precision conversion, quantise/dequantise round trips,
 * and the scalar dot kernels against a double-precision dot of the dequantised data.
 * (Bit-exactness against ggml's own output is in test_quant_fixtures.c; SIMD kernels against
 * these scalar ones in test_quant_kernels.c.) */
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"

/* The GGUF facts, written out independently of quant.c: id, name, block size, bytes/block,
 * vec-dot type (-1: size-only row, no conversion). */
static const struct {
    uint32_t id;
    const char *name;
    int64_t block;
    size_t bytes;
    int vec_dot_type;
} gguf_types[] = {
    {0, "f32", 1, 4, 0},       {1, "f16", 1, 2, 1},       {2, "q4_0", 32, 18, 8},  {3, "q4_1", 32, 20, 9},
    {6, "q5_0", 32, 22, 8},    {7, "q5_1", 32, 24, 9},    {8, "q8_0", 32, 34, 8},  {9, "q8_1", 32, 36, 9},
    {10, "q2_K", 256, 84, 15}, {11, "q3_K", 256, 110, 15}, {12, "q4_K", 256, 144, 15}, {13, "q5_K", 256, 176, 15},
    {14, "q6_K", 256, 210, 15}, {15, "q8_K", 256, 292, 15}, {20, "iq4_nl", 32, 18, 8}, {23, "iq4_xs", 256, 136, 15},
    {24, "i8", 1, 1, -1},      {25, "i16", 1, 2, -1},      {26, "i32", 1, 4, -1},   {27, "i64", 1, 8, -1},
    {28, "f64", 1, 8, -1},     {30, "bf16", 1, 2, 30},
};

/* Formats with a dot kernel. */
static const nx_type dot_types[] = {NX_TYPE_F32,  NX_TYPE_F16,  NX_TYPE_BF16, NX_TYPE_Q4_0,
                                    NX_TYPE_Q4_1, NX_TYPE_Q5_0, NX_TYPE_Q5_1, NX_TYPE_Q8_0,
                                    NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_Q2_K,
                                    NX_TYPE_Q3_K, NX_TYPE_IQ4_NL, NX_TYPE_IQ4_XS};

static void test_table_matches_gguf(void **state) {
    (void)state;
    int described = 0;
    for (size_t i = 0; i < NX_ARRAY_LEN(gguf_types); i++) {
        const nx_type_traits *t = nx_type_get(gguf_types[i].id);
        assert_non_null(t);
        assert_string_equal(t->name, gguf_types[i].name);
        assert_int_equal(t->block_size, gguf_types[i].block);
        assert_int_equal(t->type_size, gguf_types[i].bytes);
        assert_string_equal(nx_type_name(gguf_types[i].id), gguf_types[i].name);
        if (gguf_types[i].vec_dot_type >= 0) {
            assert_int_equal(t->vec_dot_type, gguf_types[i].vec_dot_type);
            assert_non_null(t->to_float);
            assert_non_null(t->from_float);
            /* the activation format itself must be convertible */
            assert_non_null(nx_type_get(t->vec_dot_type)->from_float);
        } else {
            assert_null(t->to_float);
            assert_null(t->vec_dot[NX_ISA_SCALAR]);
        }
        nx_type parsed;
        assert_true(nx_type_from_name(gguf_types[i].name, &parsed));
        assert_int_equal(parsed, gguf_types[i].id);
    }
    for (uint32_t id = 0; id < 64; id++) described += nx_type_get(id) != NULL;
    assert_int_equal(described, (int)NX_ARRAY_LEN(gguf_types)); /* no stray rows */
    for (size_t i = 0; i < NX_ARRAY_LEN(dot_types); i++) assert_non_null(nx_vec_dot_for(dot_types[i], NX_ISA_SCALAR));
}

static void test_names_and_unknown_ids(void **state) {
    (void)state;
    nx_type t;
    assert_true(nx_type_from_name("Q4_k", &t));
    assert_int_equal(t, NX_TYPE_Q4_K);
    assert_true(nx_type_from_name("F16", &t));
    assert_int_equal(t, NX_TYPE_F16);
    assert_false(nx_type_from_name("q4_2", &t));
    assert_false(nx_type_from_name("", &t));
    assert_false(nx_type_from_name(NULL, &t));
    assert_null(nx_type_get(4)); /* removed q4_2 */
    assert_null(nx_type_get(39));
    assert_null(nx_type_get(40));
    assert_null(nx_type_get(UINT32_MAX));
    assert_string_equal(nx_type_name(77), "unknown(77)");
    assert_null(nx_vec_dot_for(77, NX_ISA_AVX512));
    assert_null(nx_vec_dot_for(NX_TYPE_Q8_K, NX_ISA_SCALAR)); /* activation-only */
}

static void test_row_size(void **state) {
    (void)state;
    size_t sz = 0;
    nx_err e;
    assert_true(nx_row_size(NX_TYPE_Q4_K, 4096, &sz, &e));
    assert_int_equal(sz, 16 * 144);
    assert_true(nx_row_size(NX_TYPE_F32, 3, &sz, &e));
    assert_int_equal(sz, 12);
    assert_true(nx_row_size(NX_TYPE_Q8_0, 0, &sz, &e));
    assert_int_equal(sz, 0);
    assert_false(nx_row_size(NX_TYPE_Q4_K, 4000, &sz, &e));
    assert_non_null(strstr(e.msg, "4000"));
    assert_non_null(strstr(e.msg, "q4_K"));
    assert_non_null(strstr(e.msg, "256"));
    assert_false(nx_row_size(99, 32, &sz, &e));
    assert_non_null(strstr(e.msg, "99"));
    assert_false(nx_row_size(NX_TYPE_F32, -4, &sz, &e));
    assert_false(nx_row_size(NX_TYPE_F64, INT64_MAX, &sz, &e));
    assert_non_null(strstr(e.msg, "too large"));
}

/* ---- half precision ---------------------------------------------------------------------- */

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

#if defined(__x86_64__)
#include <immintrin.h>
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f) {
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
#endif

static void test_f16_known_values(void **state) {
    (void)state;
    assert_int_equal(nx_f32_to_f16(1.0f), 0x3C00);
    assert_int_equal(nx_f32_to_f16(-2.0f), 0xC000);
    assert_int_equal(nx_f32_to_f16(65504.0f), 0x7BFF);
    assert_int_equal(nx_f32_to_f16(65519.99f), 0x7BFF);
    assert_int_equal(nx_f32_to_f16(65520.0f), 0x7C00); /* tie, rounds to even = inf */
    assert_int_equal(nx_f32_to_f16(1e10f), 0x7C00);
    assert_int_equal(nx_f32_to_f16(-INFINITY), 0xFC00);
    assert_int_equal(nx_f32_to_f16(0x1p-24f), 0x0001);  /* smallest subnormal */
    assert_int_equal(nx_f32_to_f16(0x1p-25f), 0x0000);  /* tie -> even (0) */
    assert_int_equal(nx_f32_to_f16(0x1.8p-24f), 0x0002); /* 1.5 ulp tie -> 2 */
    assert_int_equal(nx_f32_to_f16(0x1.0p-14f), 0x0400); /* smallest normal */
    assert_int_equal(nx_f32_to_f16(0x1.ffcp-15f), 0x0400); /* rounds up from subnormal */
    assert_int_equal(nx_f32_to_f16(1.0f + 0x1p-11f), 0x3C00); /* tie -> even */
    assert_int_equal(nx_f32_to_f16(1.0f + 0x1.8p-10f), 0x3C02); /* tie -> even (up) */
    assert_int_equal(nx_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(nx_f32_to_f16(NAN) & 0x7FFF, 0x7E00);
    assert_true(nx_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(nx_f16_to_f32(0x7BFF) == 65504.0f);
    assert_true(isinf(nx_f16_to_f32(0xFC00)) && nx_f16_to_f32(0xFC00) < 0);
    assert_true(isnan(nx_f16_to_f32(0x7E00)));
}

static void test_f16_exhaustive_and_vs_hardware(void **state) {
    (void)state;
    /* every half survives half -> float -> half */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nx_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(nx_f32_to_f16(f), h);
    }
#if defined(__x86_64__)
    unsigned ca, cb, cc, cd; /* CPUID.1:ECX.F16C (clang 14's __builtin_cpu_supports lacks "f16c") */
    if (!__get_cpuid(1, &ca, &cb, &cc, &cd) || !(cc & (1u << 29))) {
        skip(); /* loud: cmocka reports the test as SKIPPED */
    }
    for (uint32_t h = 0; h < 65536; h++) {
        float a = nx_f16_to_f32((uint16_t)h), b = hw_f16_to_f32((uint16_t)h);
        if (isnan(a)) assert_true(isnan(b));
        else assert_int_equal(bits_of(a), bits_of(b));
    }
    /* a dense sample of all float bit patterns (stride coprime with 2^32), plus every pattern
     * near the half rounding boundaries */
    for (uint64_t u = 0; u < (1ull << 32); u += 4093) {
        float f = float_of((uint32_t)u);
        if (isnan(f)) continue;
        assert_int_equal(nx_f32_to_f16(f), hw_f32_to_f16(f));
    }
    for (uint32_t h = 0; h < 0x7C00; h += 7) {
        uint32_t center = bits_of(nx_f16_to_f32((uint16_t)h));
        for (int d = -3; d <= 3; d++) {
            float f = float_of(center + 0x1000u + (uint32_t)d); /* around the midpoint above h */
            assert_int_equal(nx_f32_to_f16(f), hw_f32_to_f16(f));
        }
    }
#endif
}

static void test_bf16(void **state) {
    (void)state;
    assert_int_equal(nx_f32_to_bf16(1.0f), 0x3F80);
    assert_int_equal(nx_f32_to_bf16(float_of(0x3F808000u)), 0x3F80); /* tie -> even */
    assert_int_equal(nx_f32_to_bf16(float_of(0x3F818000u)), 0x3F82); /* tie -> even (up) */
    assert_int_equal(nx_f32_to_bf16(float_of(0x3F808001u)), 0x3F81);
    assert_int_equal(nx_f32_to_bf16(float_of(0x00000001u)), 0x0000); /* subnormals round, not flush */
    assert_int_equal(nx_f32_to_bf16(float_of(0x00018000u)), 0x0002);
    assert_int_equal(nx_f32_to_bf16(float_of(0x7F7FFFFFu)), 0x7F80); /* FLT_MAX rounds to inf */
    assert_int_equal(nx_f32_to_bf16(float_of(0x7F800001u)), 0x7FC0); /* sNaN becomes quiet NaN */
    assert_int_equal(nx_f32_to_bf16(float_of(0xFFC12345u)), 0xFFC1);
    for (uint32_t h = 0; h < 65536; h++) {
        float f = nx_bf16_to_f32((uint16_t)h);
        assert_int_equal(bits_of(f), h << 16);
        if (!isnan(f)) assert_int_equal(nx_f32_to_bf16(f), h);
    }
}

/* ---- round trips ------------------------------------------------------------------------- */

static void fill_gaussian(float *x, int64_t n, uint64_t seed, float scale) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) x[i] = scale * tu_rng_normal(&r);
}

static void *quantize(nx_type type, const float *x, int64_t n) {
    size_t sz;
    assert_true(nx_row_size(type, n, &sz, NULL));
    void *q = malloc(sz ? sz : 1);
    nx_type_get(type)->from_float(x, q, n);
    return q;
}

/* Legacy formats are round-to-nearest on a uniform grid: every element is within half a step
 * of its code, except the side opposite the extreme element of a symmetric format (it can sit
 * one full step away, because the code range is [-2^(b-1), 2^(b-1)-1]) and the fp16 rounding
 * of the scale, which moves every code by at most |q| * d * 2^-11. */
static void test_legacy_round_trip_error_bounds(void **state) {
    (void)state;
    const int64_t n = 4096;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    const nx_type types[] = {NX_TYPE_Q4_0, NX_TYPE_Q4_1, NX_TYPE_Q5_0, NX_TYPE_Q5_1, NX_TYPE_Q8_0, NX_TYPE_Q8_1};
    const int levels[] = {16, 16, 32, 32, 255, 255};
    for (size_t t = 0; t < NX_ARRAY_LEN(types); t++) {
        fill_gaussian(x, n, 100 + t, 3.0f);
        void *q = quantize(types[t], x, n);
        nx_type_get(types[t])->to_float(q, y, n);
        for (int64_t b = 0; b < n / 32; b++) {
            float lo = x[32 * b], hi = x[32 * b];
            for (int j = 1; j < 32; j++) {
                lo = fminf(lo, x[32 * b + j]);
                hi = fmaxf(hi, x[32 * b + j]);
            }
            const float range = (types[t] == NX_TYPE_Q4_1 || types[t] == NX_TYPE_Q5_1)
                                    ? hi - lo
                                    : 2 * fmaxf(fabsf(lo), fabsf(hi));
            const float step = range / (float)(levels[t] - 1);
            const float absmax = fmaxf(fabsf(lo), fabsf(hi));
            const float bound = step * (types[t] == NX_TYPE_Q4_1 || types[t] == NX_TYPE_Q5_1 ? 0.5f : 1.0f) +
                                absmax * 0x1p-10f + 1e-6f;
            for (int j = 0; j < 32; j++) {
                if (fabsf(x[32 * b + j] - y[32 * b + j]) > bound) {
                    print_error("%s block %lld elem %d: x=%g y=%g bound=%g\n", nx_type_name(types[t]), (long long)b,
                                j, x[32 * b + j], y[32 * b + j], bound);
                    fail();
                }
            }
        }
        free(q);
    }
    free(x);
    free(y);
}

static double rel_rmse(const float *x, const float *y, int64_t n) {
    double se = 0, ss = 0;
    for (int64_t i = 0; i < n; i++) {
        se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        ss += (double)x[i] * x[i];
    }
    return sqrt(se / ss);
}

/* K formats: relative RMSE on gaussian data must be below what a uniform grid of the same bit
 * width guarantees (step/sqrt(12) with the step set by a 4-sigma range per sub-block, i.e.
 * 8 sigma / (2^bits - 1) / sqrt(12)); the fitted scales do better than that. */
static void test_k_round_trip_rmse(void **state) {
    (void)state;
    const int64_t n = 256 * 32;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    const nx_type types[] = {NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_Q8_K,
                             NX_TYPE_Q2_K, NX_TYPE_Q3_K, NX_TYPE_IQ4_NL, NX_TYPE_IQ4_XS};
    const int bits[] = {4, 5, 6, 8, 2, 3, 4, 4};
    for (size_t t = 0; t < NX_ARRAY_LEN(types); t++) {
        fill_gaussian(x, n, 200 + t, 0.02f);
        void *q = quantize(types[t], x, n);
        nx_type_get(types[t])->to_float(q, y, n);
        double e = rel_rmse(x, y, n);
        double bound = 8.0 / ((1 << bits[t]) - 1) / sqrt(12.0);
        if (!(e < bound)) {
            print_error("%s: relative rmse %g >= %g\n", nx_type_name(types[t]), e, bound);
            fail();
        }
        free(q);
    }
    free(x);
    free(y);
}

/* All-zero and constant blocks must survive exactly; q8_K of zeros has zero bsums. */
static void test_degenerate_blocks(void **state) {
    (void)state;
    float x[512], y[512];
    const nx_type types[] = {NX_TYPE_Q4_0, NX_TYPE_Q4_1, NX_TYPE_Q5_0, NX_TYPE_Q5_1, NX_TYPE_Q8_0,
                             NX_TYPE_Q8_1, NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_Q8_K,
                             NX_TYPE_F16,  NX_TYPE_BF16, NX_TYPE_F32,  NX_TYPE_Q2_K, NX_TYPE_Q3_K,
                             NX_TYPE_IQ4_NL, NX_TYPE_IQ4_XS};
    for (size_t t = 0; t < NX_ARRAY_LEN(types); t++) {
        memset(x, 0, sizeof x);
        void *q = quantize(types[t], x, 512);
        nx_type_get(types[t])->to_float(q, y, 512);
        for (int i = 0; i < 512; i++) assert_true(y[i] == 0.0f);
        free(q);
    }
    /* a constant block is the extreme element everywhere: exact where the scale (max/-8,
     * max/-16) is a power of two, within the fp16 (q8_0) or float (q8_K) rounding of
     * amax/127 otherwise */
    for (int i = 0; i < 512; i++) x[i] = -0.5f;
    const nx_type consts[] = {NX_TYPE_Q4_0, NX_TYPE_Q5_0, NX_TYPE_F16, NX_TYPE_BF16, NX_TYPE_Q8_0, NX_TYPE_Q8_K};
    const float tol[] = {0, 0, 0, 0, 0.5f * 0x1p-11f, 0.5f * 0x1p-23f};
    for (size_t t = 0; t < NX_ARRAY_LEN(consts); t++) {
        void *q = quantize(consts[t], x, 512);
        nx_type_get(consts[t])->to_float(q, y, 512);
        for (int i = 0; i < 512; i++) assert_true(fabsf(y[i] + 0.5f) <= tol[t]);
        free(q);
    }
    nx_block_q8_K b;
    memset(x, 0, sizeof x);
    memset(&b, 0x55, sizeof b);
    nx_type_get(NX_TYPE_Q8_K)->from_float(x, &b, 256);
    for (int j = 0; j < 16; j++) assert_int_equal(b.bsums[j], 0);
}

/* q8_K's bsums are the sums of its codes; q8_1's s is d * sum(codes). */
static void test_activation_side_sums(void **state) {
    (void)state;
    float x[512];
    fill_gaussian(x, 512, 7, 1.0f);
    nx_block_q8_K k[2];
    nx_type_get(NX_TYPE_Q8_K)->from_float(x, k, 512);
    for (int b = 0; b < 2; b++)
        for (int j = 0; j < 16; j++) {
            int s = 0;
            for (int i = 0; i < 16; i++) s += k[b].qs[16 * j + i];
            assert_int_equal(k[b].bsums[j], s);
        }
    nx_block_q8_1 q[16];
    nx_type_get(NX_TYPE_Q8_1)->from_float(x, q, 512);
    for (int b = 0; b < 16; b++) {
        int s = 0;
        for (int i = 0; i < 32; i++) s += q[b].qs[i];
        float want = (float)s * nx_f16_to_f32(q[b].d);
        assert_true(fabsf(nx_f16_to_f32(q[b].s) - want) <= fabsf(want) * 0x1p-10f + 1e-6f);
    }
}

/* ---- scalar dots vs a double dot of the dequantised operands ------------------------------
 * The kernel sees exactly the quantised weights and activations the reference dequantises, so
 * the only difference is float rounding of the per-block partial sums: bounded by a few ulp of
 * sum |w||x|. */
static void test_scalar_dots_match_dequantized(void **state) {
    (void)state;
    const int64_t n = 1024;
    const int nrows = 11;
    float *w = malloc(n * sizeof(float)), *x = malloc(nrows * n * sizeof(float));
    float *wd = malloc(n * sizeof(float)), *xd = malloc(n * sizeof(float));
    for (size_t t = 0; t < NX_ARRAY_LEN(dot_types); t++) {
        const nx_type_traits *tw = nx_type_get(dot_types[t]);
        const nx_type_traits *tx = nx_type_get(tw->vec_dot_type);
        fill_gaussian(w, n, 300 + t, 1.0f);
        fill_gaussian(x, nrows * n, 400 + t, 1.0f);
        void *wq = quantize(dot_types[t], w, n);
        size_t xrow;
        assert_true(nx_row_size(tw->vec_dot_type, n, &xrow, NULL));
        char *xq = malloc(xrow * nrows);
        for (int r = 0; r < nrows; r++) tx->from_float(x + r * n, xq + r * xrow, n);
        float out[11];
        tw->vec_dot[NX_ISA_SCALAR](n, out, wq, xq, xrow, nrows);
        tw->to_float(wq, wd, n);
        for (int r = 0; r < nrows; r++) {
            tx->to_float(xq + r * xrow, xd, n);
            double ref = 0, mag = 0, s_err = 0;
            for (int64_t i = 0; i < n; i++) {
                ref += (double)wd[i] * xd[i];
                mag += fabs((double)wd[i] * xd[i]);
            }
            if (tw->vec_dot_type == NX_TYPE_Q8_1) {
                /* by format definition the q4_1/q5_1 min term uses q8_1's s = d*sum(q) stored
                 * in fp16: allow its rounding, |m| * |s| * 2^-11 per block */
                const nx_block_q8_1 *xb = (const nx_block_q8_1 *)(xq + r * xrow);
                for (int64_t b = 0; b < n / 32; b++) {
                    float m = dot_types[t] == NX_TYPE_Q4_1 ? nx_f16_to_f32(((const nx_block_q4_1 *)wq)[b].m)
                                                           : nx_f16_to_f32(((const nx_block_q5_1 *)wq)[b].m);
                    float sb = 0;
                    for (int i = 0; i < 32; i++) sb += xb[b].qs[i];
                    s_err += fabs(m) * fabs(sb * nx_f16_to_f32(xb[b].d)) * 0x1p-11;
                }
            }
            if (fabs(out[r] - ref) > 1e-5 * mag + s_err) {
                print_error("%s row %d: got %.9g want %.9g (mag %g)\n", tw->name, r, out[r], ref, mag);
                fail();
            }
        }
        free(wq);
        free(xq);
    }
    free(w);
    free(x);
    free(wd);
    free(xd);
}

/* The word-parallel scale unpacking used by the SIMD kernels equals the per-index one. */
static void test_k4_scale_unpack(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 5);
    for (int it = 0; it < 20000; it++) {
        uint8_t scales[12], sc[8], m[8];
        for (int i = 0; i < 12; i++) scales[i] = (uint8_t)tu_rng_u64(&r);
        nx_k4_unpack_scales(scales, sc, m);
        for (int j = 0; j < 8; j++) {
            uint8_t s1, m1;
            nx_k4_scale_min(j, scales, &s1, &m1);
            assert_int_equal(sc[j], s1);
            assert_int_equal(m[j], m1);
        }
    }
}

/* q3_K's word-parallel scale unpacking equals the format's per-index definition. */
static void test_q3_scale_unpack(void **state) {
    (void)state;
    tu_rng r;
    tu_rng_seed(&r, 6);
    for (int it = 0; it < 20000; it++) {
        uint8_t scales[12], s[16];
        for (int i = 0; i < 12; i++) scales[i] = (uint8_t)tu_rng_u64(&r);
        nx_q3_unpack_scales(scales, s);
        for (int j = 0; j < 16; j++) {
            const int lo = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
            const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
            assert_int_equal(s[j], lo | (hi << 4));
        }
    }
}

/* (That the level is fixed at first use and NX_ISA read then: test_common.c, whose process has
 * not read it before.) */
static void test_isa_names_and_fallback(void **state) {
    (void)state;
    nx_isa named;
    assert_true(nx_isa_from_name("AVX2", &named));
    assert_int_equal(named, NX_ISA_AVX2);
    assert_true(nx_isa_from_name("scalar", &named));
    assert_int_equal(named, NX_ISA_SCALAR);
    assert_false(nx_isa_from_name("bogus", &named));
    assert_string_equal(nx_isa_name(NX_ISA_AVX512), "avx512");
    /* dispatch falls back to lower levels */
    for (size_t t = 0; t < NX_ARRAY_LEN(dot_types); t++)
        for (int isa = 0; isa < NX_ISA_COUNT; isa++) assert_non_null(nx_vec_dot_for(dot_types[t], (nx_isa)isa));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_matches_gguf),
        cmocka_unit_test(test_names_and_unknown_ids),
        cmocka_unit_test(test_row_size),
        cmocka_unit_test(test_f16_known_values),
        cmocka_unit_test(test_f16_exhaustive_and_vs_hardware),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_legacy_round_trip_error_bounds),
        cmocka_unit_test(test_k_round_trip_rmse),
        cmocka_unit_test(test_degenerate_blocks),
        cmocka_unit_test(test_activation_side_sums),
        cmocka_unit_test(test_scalar_dots_match_dequantized),
        cmocka_unit_test(test_k4_scale_unpack),
        cmocka_unit_test(test_q3_scale_unpack),
        cmocka_unit_test(test_isa_names_and_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
