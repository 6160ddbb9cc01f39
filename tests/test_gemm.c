/* test_gemm.c - the GEMM path of nx_matmul (gemm.h) is bit-identical to the AVX-512 vec-dot
 * kernels, for every type it supports, many shapes (tails in the weight rows, the activation
 * rows and the blocks), raw blocks with every code value, extreme activations, 1 and 3 threads.
 * Its accuracy against double-precision references is covered by test_matmul (T = 17 takes
 * the GEMM path). */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/gemm.h"
#include "quant/quant_impl.h"

static const nx_type types[] = {NX_TYPE_Q8_0, NX_TYPE_Q4_K, NX_TYPE_Q5_K,  NX_TYPE_Q6_K,
                                NX_TYPE_Q2_K, NX_TYPE_Q3_K, NX_TYPE_IQ4_XS};

static bool have_avx512(void) { return nx_cpu_isa() >= NX_ISA_AVX512; }

/* Random raw weight blocks: every byte random except the fp16 scales, which are finite
 * (|d| in [2^-14, 2^4)), so results are finite and comparable bit for bit. */
static void random_weights(nx_type type, char *w, size_t bytes, tu_rng *r) {
    for (size_t i = 0; i < bytes; i++) w[i] = (char)(tu_rng_u64(r) & 0xFF);
    const nx_type_traits *tt = nx_type_get(type);
    const size_t bs = tt->type_size;
    for (size_t b = 0; b < bytes / bs; b++) {
        char *blk = w + b * bs;
        uint16_t h[2];
        for (int k = 0; k < 2; k++) h[k] = nx_f32_to_f16((float)(tu_rng_uniform(r) * 8.0 - 4.0) + 1e-3f);
        switch (type) {
        case NX_TYPE_Q8_0: memcpy(blk, &h[0], 2); break;
        case NX_TYPE_Q4_K: memcpy(blk + offsetof(nx_block_q4_K, d), h, 4); break;
        case NX_TYPE_Q5_K: memcpy(blk + offsetof(nx_block_q5_K, d), h, 4); break;
        case NX_TYPE_Q6_K: memcpy(blk + offsetof(nx_block_q6_K, d), &h[0], 2); break;
        case NX_TYPE_Q2_K: memcpy(blk + offsetof(nx_block_q2_K, d), h, 4); break;
        case NX_TYPE_Q3_K: memcpy(blk + offsetof(nx_block_q3_K, d), &h[0], 2); break;
        case NX_TYPE_IQ4_XS: memcpy(blk + offsetof(nx_block_iq4_xs, d), &h[0], 2); break;
        default: fail();
        }
    }
}

/* Activation rows as from_float makes them, from floats of very different magnitudes: normal,
 * all zero, tiny (fp16 scale underflow), huge, one spike. */
static void fill_acts(float *x, int64_t n, int64_t T, tu_rng *r) {
    for (int64_t t = 0; t < T; t++) {
        float *row = x + t * n;
        const int kind = (int)(t % 6);
        for (int64_t i = 0; i < n; i++) {
            const float v = (float)tu_rng_normal(r);
            row[i] = kind == 1 ? 0.0f : kind == 2 ? v * 1e-9f : kind == 3 ? v * 3e4f : kind == 4 ? 0.0f : v;
        }
        if (kind == 4) row[n / 3] = -7.5f;
    }
}

/* y must equal, bit for bit, the 1-row kernel nx_matmul runs below 16 rows at the AVX-512
 * level, for every (row, output) pair: for q8_0 / q4_K / q5_K / q6_K the kernel on prepared
 * activations, its layout made from the same q8_0 / q8_K rows; otherwise the vec-dot kernel. */
static void check_rows(nx_type type, const char *w, size_t row_bytes, int64_t n, int64_t out, const char *xq,
                       size_t xrow, int64_t T, const float *y, const char *what) {
    const nx_prepared_dot *prep = &nx_type_get(type)->prepared[NX_ISA_AVX512];
    const bool has_prep = type == NX_TYPE_Q8_0 || type == NX_TYPE_Q4_K || type == NX_TYPE_Q5_K || type == NX_TYPE_Q6_K;
    assert_true(has_prep == (prep->dot != NULL)); /* a new prepared kernel: extend this test */
    void (*pack)(const void *, void *, int64_t) = type == NX_TYPE_Q8_0   ? nx_prep_q8_0_from_blocks
                                                  : type == NX_TYPE_Q6_K ? nx_prep_q8_K_q6_from_blocks
                                                                         : nx_prep_q8_K_from_blocks;
    nx_vec_dot_fn dot = prep->dot ? prep->dot : nx_vec_dot_for(type, NX_ISA_AVX512);
    char *xp = prep->dot ? malloc(prep->row_bytes(n)) : NULL;
    for (int64_t t = 0; t < T; t++) {
        const char *xt = xq + (size_t)t * xrow;
        if (xp) {
            pack(xt, xp, n);
            xt = xp;
        }
        for (int64_t o = 0; o < out; o++) {
            float want;
            dot(n, &want, w + (size_t)o * row_bytes, xt, xrow, 1);
            const float got = y[t * out + o];
            if (memcmp(&got, &want, sizeof got) != 0) {
                print_error("%s %s n=%lld out=%lld T=%lld: y[%lld][%lld] = %.9g, 1-row kernel %.9g\n", what,
                            nx_type_name(type), (long long)n, (long long)out, (long long)T, (long long)t,
                            (long long)o, got, want);
                fail();
            }
        }
    }
    free(xp);
}

/* Through nx_matmul: quantised weights and activations, shapes with tails, 1 and 3 threads. */
static void test_gemm_matmul_bit_identical(void **state) {
    (void)state;
    if (!have_avx512()) skip();
    static const int64_t Ts[] = {16, 17, 23, 64, 101};
    static const int64_t outs[] = {1, 3, 4, 5, 17, 67, 130};
    nx_pool *p3 = nx_pool_create(3, NULL);
    tu_rng r;
    tu_rng_seed(&r, 11);
    for (size_t ti = 0; ti < NX_ARRAY_LEN(types); ti++) {
        const nx_type type = types[ti];
        const nx_type_traits *tt = nx_type_get(type), *ta = nx_type_get(tt->vec_dot_type);
        /* q8_0: partial octets (1, 3, 13 = 8 + 5 blocks), whole ones (8, 24), groups of 16 + tails (29, 34) */
        const int64_t ns[] = {tt->block_size, 3 * tt->block_size, 8 * tt->block_size, 13 * tt->block_size,
                              24 * tt->block_size, 29 * tt->block_size, 33 * tt->block_size / 8 * 8 + tt->block_size};
        for (size_t ni = 0; ni < NX_ARRAY_LEN(ns); ni++) {
            const int64_t n = ns[ni], out = outs[(ti + ni) % NX_ARRAY_LEN(outs)], T = Ts[(ti + 2 * ni) % NX_ARRAY_LEN(Ts)];
            size_t rowb, xrow;
            assert_true(nx_row_size(type, n, &rowb, NULL));
            assert_true(nx_row_size(tt->vec_dot_type, n, &xrow, NULL));
            float *wf = malloc(sizeof(float) * (size_t)(n * out)), *x = malloc(sizeof(float) * (size_t)(n * T));
            char *wq = malloc(rowb * (size_t)out), *xq = malloc(xrow * (size_t)T);
            float *y1 = malloc(sizeof(float) * (size_t)(T * out)), *y3 = malloc(sizeof(float) * (size_t)(T * out));
            for (int64_t i = 0; i < n * out; i++) wf[i] = (float)tu_rng_normal(&r);
            for (int64_t o = 0; o < out; o++) tt->from_float(wf + o * n, wq + (size_t)o * rowb, n);
            fill_acts(x, n, T, &r);
            for (int64_t t = 0; t < T; t++) ta->from_float(x + t * n, xq + (size_t)t * xrow, n);
            nx_weight w;
            assert_true(nx_weight_init(&w, wq, type, n, out, NULL));
            nx_matmul_scratch s = {0};
            assert_true(nx_matmul(NULL, &s, &w, x, T, y1, NULL));
            check_rows(type, wq, rowb, n, out, xq, xrow, T, y1, "matmul");
            assert_true(nx_matmul(p3, &s, &w, x, T, y3, NULL));
            assert_memory_equal(y1, y3, sizeof(float) * (size_t)(T * out));
            nx_matmul_scratch_free(&s);
            free(wf), free(x), free(wq), free(xq), free(y1), free(y3);
        }
    }
    nx_pool_free(p3);
}

/* Directly on raw blocks: every code byte value (q8_0 -128 included), random scales. */
static void test_gemm_raw_blocks(void **state) {
    (void)state;
    if (!have_avx512()) skip();
    tu_rng r;
    tu_rng_seed(&r, 12);
    nx_pool *p2 = nx_pool_create(2, NULL);
    for (size_t ti = 0; ti < NX_ARRAY_LEN(types); ti++) {
        const nx_type type = types[ti];
        const nx_gemm_ops *ops = nx_gemm_ops_for(type, NX_ISA_AVX512);
        assert_non_null(ops);
        const nx_type_traits *tt = nx_type_get(type);
        const int64_t n = 5 * tt->block_size * (type == NX_TYPE_Q8_0 ? 7 : 1), out = 9, T = 37;
        size_t rowb, xrow;
        assert_true(nx_row_size(type, n, &rowb, NULL));
        assert_true(nx_row_size(tt->vec_dot_type, n, &xrow, NULL));
        char *wq = malloc(rowb * out), *xq = malloc(xrow * T);
        float *y = malloc(sizeof(float) * T * out);
        random_weights(type, wq, rowb * out, &r);
        /* activations: codes in [-127, 127] (the from_float contract), random scales and sums */
        for (int64_t t = 0; t < T; t++) {
            char *row = xq + (size_t)t * xrow;
            if (tt->vec_dot_type == NX_TYPE_Q8_0) {
                for (int64_t b = 0; b < n / 32; b++) {
                    nx_block_q8_0 *blk = (nx_block_q8_0 *)row + b;
                    blk->d = nx_f32_to_f16((float)tu_rng_uniform(&r) * 2.0f);
                    for (int i = 0; i < 32; i++) blk->qs[i] = (int8_t)((int)(tu_rng_u64(&r) % 255) - 127);
                }
            } else {
                for (int64_t b = 0; b < n / 256; b++) {
                    nx_block_q8_K *blk = (nx_block_q8_K *)row + b;
                    blk->d = (float)tu_rng_normal(&r);
                    /* q8_K codes may be -128 (its quantiser rounds -max to -128) */
                    for (int i = 0; i < 256; i++) blk->qs[i] = (int8_t)((int)(tu_rng_u64(&r) % 256) - 128);
                    for (int j = 0; j < 16; j++) {
                        int sum = 0;
                        for (int i = 0; i < 16; i++) sum += blk->qs[16 * j + i];
                        blk->bsums[j] = (int16_t)sum;
                    }
                }
            }
        }
        nx_weight w;
        assert_true(nx_weight_init(&w, wq, type, n, out, NULL));
        void *scratch = nx_alloc_aligned(nx_gemm_scratch_bytes(ops, n, T, 2), "test", NULL);
        assert_non_null(scratch);
        nx_gemm(p2, ops, &w, xq, xrow, T, y, scratch);
        check_rows(type, wq, rowb, n, out, xq, xrow, T, y, "raw");
        nx_free_aligned(scratch);
        free(wq), free(xq), free(y);
    }
    nx_pool_free(p2);
}

/* Types without a GEMM kernel, and lower ISAs, keep the vec-dot path. */
static void test_gemm_dispatch(void **state) {
    (void)state;
    assert_null(nx_gemm_ops_for(NX_TYPE_F32, NX_ISA_AVX512));
    assert_null(nx_gemm_ops_for(NX_TYPE_Q4_0, NX_ISA_AVX512));
    assert_null(nx_gemm_ops_for(NX_TYPE_IQ4_NL, NX_ISA_AVX512));
    assert_null(nx_gemm_ops_for(77, NX_ISA_AVX512));
    assert_null(nx_gemm_ops_for(NX_TYPE_Q8_0, NX_ISA_AVX2));
    assert_null(nx_gemm_ops_for(NX_TYPE_Q8_0, NX_ISA_SCALAR));
    for (size_t ti = 0; ti < NX_ARRAY_LEN(types); ti++) {
        const nx_gemm_ops *ops = nx_gemm_ops_for(types[ti], NX_ISA_AVX512);
        assert_non_null(ops);
        assert_true(ops->mr >= 1 && ops->mr <= 16 && ops->nr >= 1 && ops->nr <= 16);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_matmul_bit_identical),
        cmocka_unit_test(test_gemm_raw_blocks),
        cmocka_unit_test(test_gemm_dispatch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
