/* test_quant_kernels.c - every SIMD dot kernel against the scalar one.
 *
 * Data: weight rows are random bytes in the block layout (every code, every 6-bit scale/min,
 * q8_0 codes including -128) with the fp16 scale fields replaced by sane random values; plain
 * formats get random floats.  Activation rows come from the activation format's from_float
 * applied to several distributions: gaussian, all zeros, tiny (1e-30), huge (1e15), one big
 * outlier per block, constant (all codes at +-127 = max-int8), alternating sign extremes.
 * Lengths cover one block, several blocks, odd counts, and (plain formats) non-multiples of the
 * vector width; row counts 1..9 cover the 4-row groups plus every tail.
 *
 * Tolerance.  Integer block sums are exact in both kernels, so they differ only in the order
 * and grouping of float operations: each per-block term (scale product times the block sum,
 * converted to float) is rounded once or twice, and the terms are added in a different order.
 * Standard summation error analysis bounds the difference of two such sums by
 * 2 * (terms + 8) * 2^-24 * sum|term| (terms = blocks, or elements for plain formats;
 * +8 for the lane reductions), and sum|term| <= mag = sum_i |w_i| |x_i| of the dequantised
 * operands (computed here in double).  For plain formats the scalar kernel accumulates in
 * double, so only the SIMD side's rounding counts; the same bound covers it.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"
#include "quant/quant_blocks.h"
#include "quant/quant_impl.h"

static const nx_type types[] = {NX_TYPE_F32,  NX_TYPE_F16,  NX_TYPE_BF16, NX_TYPE_Q8_0,
                                NX_TYPE_Q4_0, NX_TYPE_Q5_0, NX_TYPE_Q4_1, NX_TYPE_Q5_1,
                                NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_Q2_K,
                                NX_TYPE_Q3_K, NX_TYPE_IQ4_NL, NX_TYPE_IQ4_XS};

enum { DIST_GAUSS, DIST_ZERO, DIST_TINY, DIST_HUGE, DIST_OUTLIER, DIST_CONST, DIST_ALT, DIST_COUNT };
static const char *dist_names[] = {"gauss", "zero", "tiny", "huge", "outlier", "const", "alternating"};

/* huge: 1e15 scale, except where the activation format's range is smaller: f16 values end at
 * 65504, q8_0/q8_1 store amax/127 as fp16, q8_1 also the block sum */
static void fill_dist(float *x, int64_t n, int dist, float huge, tu_rng *r) {
    for (int64_t i = 0; i < n; i++) {
        float g = tu_rng_normal(r);
        switch (dist) {
        case DIST_GAUSS: x[i] = g; break;
        case DIST_ZERO: x[i] = 0; break;
        case DIST_TINY: x[i] = g * 1e-30f; break;
        case DIST_HUGE: x[i] = g * huge; break;
        case DIST_OUTLIER: x[i] = (i % 32 == 5) ? 1000.0f : g * 0.01f; break;
        case DIST_CONST: x[i] = -3.0f; break;
        default: x[i] = (i & 1) ? 1e4f : -1e4f; break;
        }
    }
}

/* A random fp16 scale in +-[2^-10, 2^2]. */
static uint16_t rand_scale(tu_rng *r) {
    float v = ldexpf(1.0f + tu_rng_uniform(r), (int)(tu_rng_u64(r) % 13) - 10);
    return nx_f32_to_f16(tu_rng_u64(r) & 1 ? -v : v);
}

/* Random weight row of n elements: random bytes, then valid scales. */
static void random_weights(nx_type type, void *dst, int64_t n, tu_rng *r) {
    const nx_type_traits *t = nx_type_get(type);
    const int64_t nb = n / t->block_size;
    if (!t->is_quantized) {
        float *tmp = malloc(sizeof(float) * (size_t)n);
        for (int64_t i = 0; i < n; i++) tmp[i] = tu_rng_normal(r);
        t->from_float(tmp, dst, n);
        free(tmp);
        return;
    }
    unsigned char *b = dst;
    for (size_t i = 0; i < (size_t)nb * t->type_size; i++) b[i] = (unsigned char)tu_rng_u64(r);
    for (int64_t i = 0; i < nb; i++) {
        void *blk = b + (size_t)i * t->type_size;
        switch (type) {
        case NX_TYPE_Q8_0: ((nx_block_q8_0 *)blk)->d = rand_scale(r); break;
        case NX_TYPE_Q4_0: ((nx_block_q4_0 *)blk)->d = rand_scale(r); break;
        case NX_TYPE_Q5_0: ((nx_block_q5_0 *)blk)->d = rand_scale(r); break;
        case NX_TYPE_Q4_1: ((nx_block_q4_1 *)blk)->d = rand_scale(r), ((nx_block_q4_1 *)blk)->m = rand_scale(r); break;
        case NX_TYPE_Q5_1: ((nx_block_q5_1 *)blk)->d = rand_scale(r), ((nx_block_q5_1 *)blk)->m = rand_scale(r); break;
        case NX_TYPE_Q4_K: ((nx_block_q4_K *)blk)->d = rand_scale(r), ((nx_block_q4_K *)blk)->dmin = rand_scale(r); break;
        case NX_TYPE_Q5_K: ((nx_block_q5_K *)blk)->d = rand_scale(r), ((nx_block_q5_K *)blk)->dmin = rand_scale(r); break;
        case NX_TYPE_Q6_K: ((nx_block_q6_K *)blk)->d = rand_scale(r); break;
        case NX_TYPE_Q2_K: ((nx_block_q2_K *)blk)->d = rand_scale(r), ((nx_block_q2_K *)blk)->dmin = rand_scale(r); break;
        case NX_TYPE_Q3_K: ((nx_block_q3_K *)blk)->d = rand_scale(r); break;
        case NX_TYPE_IQ4_NL: ((nx_block_iq4_nl *)blk)->d = rand_scale(r); break;
        case NX_TYPE_IQ4_XS: ((nx_block_iq4_xs *)blk)->d = rand_scale(r); break;
        default: break;
        }
    }
}

static int checks_done;

static float huge_for(nx_type act) {
    if (act == NX_TYPE_F16) return 8000.0f;
    if (act == NX_TYPE_Q8_0) return 1e6f;
    if (act == NX_TYPE_Q8_1) return 1000.0f; /* its fp16 s = d * sum(q) must not overflow either */
    return 1e15f;
}

static void check_type_isa(nx_type type, nx_isa isa) {
    const nx_type_traits *tw = nx_type_get(type);
    const nx_type_traits *tx = nx_type_get(tw->vec_dot_type);
    nx_vec_dot_fn simd = tw->vec_dot[isa];
    nx_vec_dot_fn ref = tw->vec_dot[NX_ISA_SCALAR];
    if (!simd) {
        print_message("NOTE: no %s kernel for %s (falls back to a lower ISA)\n", nx_isa_name(isa), tw->name);
        return;
    }
    const int64_t bs = tw->block_size;
    int64_t lens_q[] = {1, 2, 3, 5, 8, 16, 17};
    int64_t lens_k[] = {1, 2, 3, 5, 16};
    int64_t lens_p[] = {1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099};
    const int64_t *lens = bs == 1 ? lens_p : bs == 32 ? lens_q : lens_k;
    const size_t nlens = bs == 1 ? NX_ARRAY_LEN(lens_p) : bs == 32 ? NX_ARRAY_LEN(lens_q) : NX_ARRAY_LEN(lens_k);
    tu_rng rng;
    tu_rng_seed(&rng, (uint64_t)type * 1000 + (uint64_t)isa);
    for (size_t li = 0; li < nlens; li++) {
        const int64_t n = bs == 1 ? lens[li] : lens[li] * bs;
        size_t wrow, xrow;
        assert_true(nx_row_size(type, n, &wrow, NULL));
        assert_true(nx_row_size(tw->vec_dot_type, n, &xrow, NULL));
        void *w = malloc(wrow);
        float *wd = malloc(sizeof(float) * (size_t)n), *xd = malloc(sizeof(float) * (size_t)n);
        float *xf = malloc(sizeof(float) * (size_t)n);
        const int maxrows = 9;
        char *x = malloc(xrow * maxrows);
        /* the kernel on prepared activations, if this type has one at this ISA */
        const nx_prepared_dot *prep = tw->prepared[isa].dot ? &tw->prepared[isa] : NULL;
        const size_t prow = prep ? prep->row_bytes(n) : 0;
        char *xp = prep ? malloc(prow * maxrows) : NULL;
        for (int dist = 0; dist < DIST_COUNT; dist++) {
            random_weights(type, w, n, &rng);
            tw->to_float(w, wd, n);
            double mag[9];
            for (int r = 0; r < maxrows; r++) {
                fill_dist(xf, n, dist, huge_for(tw->vec_dot_type), &rng);
                tx->from_float(xf, x + r * xrow, n);
                if (prep) prep->prepare(xf, xp + r * prow, n);
                tx->to_float(x + r * xrow, xd, n);
                mag[r] = 0;
                for (int64_t i = 0; i < n; i++) mag[r] += fabs((double)wd[i] * xd[i]);
            }
            for (int nrows = 1; nrows <= maxrows; nrows++) {
                float want[9];
                ref(n, want, w, x, xrow, nrows);
                for (int variant = 0; variant < (prep ? 2 : 1); variant++) {
                    float got[9];
                    memset(got, 0xFF, sizeof got);
                    if (variant == 0) simd(n, got, w, x, xrow, nrows);
                    else prep->dot(n, got, w, xp, prow, nrows);
                    const double terms = (double)(bs == 1 ? n : n / bs);
                    for (int r = 0; r < nrows; r++) {
                        const double tol = 2.0 * (terms + 8) * 0x1p-24 * mag[r] + 1e-30;
                        const bool ok =
                            (isinf(want[r]) && got[r] == want[r]) || fabs((double)got[r] - want[r]) <= tol;
                        if (!ok) {
                            print_error("%s %s%s n=%lld dist=%s nrows=%d row %d: simd %.9g scalar %.9g (tol %g)\n",
                                        tw->name, nx_isa_name(isa), variant ? " (prepared)" : "", (long long)n,
                                        dist_names[dist], nrows, r, got[r], want[r], tol);
                            fail();
                        }
                    }
                    /* rows beyond nrows are not written */
                    for (int r = nrows; r < 9; r++) assert_true(isnan(got[r]));
                    /* the prepared kernel gives every row the same bits whether it runs alone or in a
                     * group (decode == verify batch; its float order is its own, not the plain
                     * kernel's, and the GEMM path repeats it: test_gemm) */
                    if (variant == 1)
                        for (int r = 0; r < nrows; r++) {
                            float one;
                            prep->dot(n, &one, w, xp + r * prow, prow, 1);
                            if (memcmp(&one, &got[r], sizeof one) != 0) {
                                print_error("%s n=%lld dist=%s nrows=%d row %d: prepared kernel alone %.9g, in a group %.9g\n",
                                            tw->name, (long long)n, dist_names[dist], nrows, r, one, got[r]);
                                fail();
                            }
                        }
                    checks_done++;
                }
            }
        }
        free(w);
        free(wd);
        free(xd);
        free(xf);
        free(x);
        free(xp);
    }
}

static void check_isa(nx_isa isa) {
    if (nx_cpu_isa() < isa) {
        /* loud: the CPU (or NX_ISA) does not allow this level; cmocka prints SKIPPED */
        print_message("SKIPPING %s kernels: this CPU does not support them (or NX_ISA lowered the level)\n",
                      nx_isa_name(isa));
        skip();
    }
    for (size_t t = 0; t < NX_ARRAY_LEN(types); t++) check_type_isa(types[t], isa);
}

static void test_avx2_kernels_match_scalar(void **state) {
    (void)state;
    check_isa(NX_ISA_AVX2);
}

static void test_avx512_kernels_match_scalar(void **state) {
    (void)state;
    check_isa(NX_ISA_AVX512);
}

/* The kernels must also agree when activation rows are not contiguous (stride > row size). */
static void test_strided_rows(void **state) {
    (void)state;
    const int64_t n = 512;
    tu_rng rng;
    tu_rng_seed(&rng, 99);
    for (size_t t = 0; t < NX_ARRAY_LEN(types); t++) {
        const nx_type_traits *tw = nx_type_get(types[t]);
        const nx_type_traits *tx = nx_type_get(tw->vec_dot_type);
        size_t wrow, xrow;
        assert_true(nx_row_size(types[t], n, &wrow, NULL));
        assert_true(nx_row_size(tw->vec_dot_type, n, &xrow, NULL));
        const size_t stride = xrow + 64;
        void *w = malloc(wrow);
        char *x = malloc(stride * 5);
        float xf[512];
        random_weights(types[t], w, n, &rng);
        for (int r = 0; r < 5; r++) {
            fill_dist(xf, n, DIST_GAUSS, 1, &rng);
            tx->from_float(xf, x + r * stride, n);
        }
        float want[5], got[5];
        tw->vec_dot[NX_ISA_SCALAR](n, want, w, x, stride, 5);
        for (int isa = 1; isa <= (int)nx_cpu_isa(); isa++) {
            nx_vec_dot_fn f = nx_vec_dot_for(types[t], (nx_isa)isa);
            f(n, got, w, x, stride, 5);
            for (int r = 0; r < 5; r++) assert_true(fabsf(got[r] - want[r]) <= 1e-4f * (fabsf(want[r]) + 10.0f));
            /* one row at a time gives the same as the batch */
            for (int r = 0; r < 5; r++) {
                float one;
                f(n, &one, w, x + r * stride, stride, 1);
                assert_true(one == got[r] || fabsf(one - got[r]) <= 1e-5f * (fabsf(got[r]) + 1.0f));
            }
        }
        free(w);
        free(x);
    }
}

/* ---- q8_0 on prepared activations (AVX-512) ----
 * The layout, as documented in quant_avx512.c: for nb blocks and no = ceil(nb/8) octets, 384
 * bytes per octet o: codes as 4 vectors of 64 bytes (vector q, bytes 8j..8j+7 = codes 8q..8q+7
 * of block 8o+j), 16 int32 corrections (lane 2j+h = -128 * sum of block 8o+j's codes in dwords
 * h, 2+h, 4+h, 6+h), 16 float scales (lane 2j+h = block 8o+j's); blocks past nb are zero. */
static const nx_prepared_dot *q8_0_prepared(void) {
    if (nx_cpu_isa() < NX_ISA_AVX512) {
        print_message("SKIPPING prepared q8_0 kernel: this CPU does not support AVX-512 (or NX_ISA lowered it)\n");
        return NULL;
    }
    const nx_prepared_dot *p = &nx_type_get(NX_TYPE_Q8_0)->prepared[NX_ISA_AVX512];
    assert_non_null(p->dot);
    return p;
}

static void test_prepared_q8_0_layout(void **state) {
    (void)state;
    const nx_prepared_dot *p = q8_0_prepared();
    if (!p) skip();
    const int64_t lens[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 33, 128};
    tu_rng rng;
    tu_rng_seed(&rng, 4242);
    for (size_t li = 0; li < NX_ARRAY_LEN(lens); li++) {
        const int64_t nb = lens[li], n = nb * 32, no = (nb + 7) / 8;
        const size_t bytes = p->row_bytes(n);
        assert_int_equal(bytes, (size_t)(384 * no));
        assert_int_equal(bytes % 64, 0);
        float *xf = malloc(sizeof(float) * (size_t)n);
        nx_block_q8_0 *ref = malloc(sizeof(nx_block_q8_0) * (size_t)nb);
        unsigned char *row = malloc(bytes), *row2 = malloc(bytes);
        for (int dist = 0; dist <= DIST_COUNT; dist++) {
            if (dist < DIST_COUNT) {
                fill_dist(xf, n, dist, 1e6f, &rng);
            } else {
                /* exact halves (amax 127 -> d = 1): roundf's ties away from zero must match */
                for (int64_t i = 0; i < n; i++) xf[i] = i % 32 == 31 ? 127.0f : (float)(i % 32) - 15.5f;
            }
            nx_type_get(NX_TYPE_Q8_0)->from_float(xf, ref, n);
            memset(row, 0xAB, bytes); /* every byte must be written, padding included */
            p->prepare(xf, row, n);
            for (int64_t o = 0; o < no; o++) {
                const unsigned char *oct = row + 384 * o;
                for (int j = 0; j < 8; j++) {
                    const int64_t b = 8 * o + j;
                    for (int q = 0; q < 4; q++)
                        for (int t = 0; t < 8; t++)
                            assert_int_equal((int8_t)oct[64 * q + 8 * j + t], b < nb ? ref[b].qs[8 * q + t] : 0);
                    for (int h = 0; h < 2; h++) {
                        int32_t want = 0, got;
                        for (int dw = h; dw < 8 && b < nb; dw += 2)
                            for (int t = 0; t < 4; t++) want -= 128 * ref[b].qs[4 * dw + t];
                        memcpy(&got, oct + 256 + 4 * (2 * j + h), 4);
                        assert_int_equal(got, want);
                        const float wantd = b < nb ? nx_f16_to_f32(ref[b].d) : 0.0f;
                        assert_true(memcmp(oct + 320 + 4 * (2 * j + h), &wantd, sizeof wantd) == 0);
                    }
                }
            }
            /* the same layout made from the q8_0 blocks (the GEMM path's packing) */
            memset(row2, 0xCD, bytes);
            nx_prep_q8_0_from_blocks(ref, row2, n);
            assert_memory_equal(row, row2, bytes);
        }
        free(xf);
        free(ref);
        free(row);
        free(row2);
    }
}

/* ---- q4_K / q5_K / q6_K on prepared q8_K activations (AVX-512) ----
 * The layouts, as documented in quant_kprep_avx512.c, spelled out here from the format
 * definitions.  q6_K, per super-block ("step") 384 bytes: codes as 4 vectors of 64 bytes (dword
 * lane k of vector q = codes 16k+4q..16k+4q+3), 16 int32 -32 * bsums[k], 16 copies of dy.
 * q4_K / q5_K, per step of two super-blocks 640 bytes (an odd last super-block pairs with zeros):
 * codes as 8 vectors of 64 bytes (dword lane 8s+j of vector v = codes 32j+4v..32j+4v+3 of
 * super-block s of the pair), 16 floats dy_s * (bsums[2j] + bsums[2j+1]), 16 floats dy_s.
 * Weights (nx_kprep_decode): the unsigned codes in the same lane order, and per lane ds = d *
 * scale, dm = dmin * min of the lane's sub-block, except that q4_K's lanes of odd j hold code * 16
 * (the high nibble in place) and ds / 16; so ds * code - dm (q6_K: ds * (code - 32)) must be
 * to_float's value, bit for bit (to_float is ggml's dequantisation, checked against ggml in
 * test_quant_fixtures). */
static int kcode(nx_type type, const void *blk, int e) { /* the unsigned code of element e */
    if (type == NX_TYPE_Q6_K) {
        const nx_block_q6_K *b = blk;
        const int h = e / 128, r = e % 128, c = r / 32, l = r % 32;
        const uint8_t lo = b->ql[64 * h + 32 * (c & 1) + l];
        return (c < 2 ? lo & 0xF : lo >> 4) | (((b->qh[32 * h + l] >> (2 * c)) & 3) << 4);
    }
    const int j = e / 32, l = e % 32;
    const uint8_t *qs = type == NX_TYPE_Q5_K ? ((const nx_block_q5_K *)blk)->qs : ((const nx_block_q4_K *)blk)->qs;
    const int code = j % 2 ? qs[32 * (j / 2) + l] >> 4 : qs[32 * (j / 2) + l] & 0xF;
    return type == NX_TYPE_Q5_K ? code | (((((const nx_block_q5_K *)blk)->qh[l] >> j) & 1) << 4) : code;
}

/* The element (of the pair's super-block *sb) behind byte u of dword lane l of code vector v of a
 * prepared step, or -1 where the layout holds a zero. */
static int kp_element(nx_type type, int64_t nb, int64_t step, int v, int l, int u, int64_t *sb) {
    if (type == NX_TYPE_Q6_K) {
        if (v >= 4) return -1;
        *sb = step;
        return 16 * l + 4 * v + u;
    }
    *sb = 2 * step + l / 8;
    if (*sb >= nb) return -1;
    return 32 * (l % 8) + 4 * v + u;
}

static void test_prepared_k_layout(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) {
        print_message("SKIPPING prepared K kernels: this CPU does not support AVX-512 (or NX_ISA lowered it)\n");
        skip();
    }
    const nx_type ktypes[] = {NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K};
    tu_rng rng;
    tu_rng_seed(&rng, 5151);
    const int64_t nb = 3, n = nb * 256; /* odd: q4_K / q5_K's last step has a zero half */
    for (size_t ti = 0; ti < NX_ARRAY_LEN(ktypes); ti++) {
        const nx_type type = ktypes[ti];
        const bool six = type == NX_TYPE_Q6_K;
        const nx_type_traits *t = nx_type_get(type);
        const nx_prepared_dot *p = &t->prepared[NX_ISA_AVX512];
        assert_non_null(p->dot);
        const int64_t nsteps = six ? nb : (nb + 1) / 2;
        const size_t step_bytes = six ? 384 : 640;
        assert_int_equal(nx_kprep_steps(type, n), nsteps);
        assert_int_equal(nx_kprep_step_bytes(type), step_bytes);
        /* weights: random bytes with sane scales */
        unsigned char *w = malloc(t->type_size * nb);
        random_weights(type, w, n, &rng);
        float *deq = malloc(sizeof(float) * n);
        t->to_float(w, deq, n);
        for (int64_t is = 0; is < nsteps; is++) {
            _Alignas(64) uint8_t codes[512];
            _Alignas(64) float ds[16], dm[16];
            memset(codes, 0xEE, sizeof codes);
            nx_kprep_decode(type, w, n, is, codes, ds, dm);
            for (int l = 0; l < 16; l++) {
                int64_t sb = 0;
                if (kp_element(type, nb, is, 0, l, 0, &sb) < 0) { /* the zero half */
                    assert_true(ds[l] == 0.0f && dm[l] == 0.0f);
                    for (int v = 0; v < 8; v++)
                        for (int u = 0; u < 4; u++) assert_int_equal(codes[64 * v + 4 * l + u], 0);
                    continue;
                }
                const int mul = type == NX_TYPE_Q4_K && l % 2 ? 16 : 1; /* q4_K high nibble in place */
                for (int v = 0; v < (six ? 4 : 8); v++)
                    for (int u = 0; u < 4; u++) {
                        const int e = kp_element(type, nb, is, v, l, u, &sb);
                        const int code = kcode(type, w + sb * t->type_size, e) * mul;
                        assert_int_equal(codes[64 * v + 4 * l + u], code);
                        volatile float prod = ds[l] * (float)(six ? code - 32 : code);
                        volatile float val = six ? prod : prod - dm[l];
                        const float want = deq[sb * 256 + e], got = val;
                        if (memcmp(&got, &want, sizeof got) != 0)
                            fail_msg("%s block %lld element %d: ds * code - dm = %.9g, to_float %.9g", t->name,
                                     (long long)sb, e, (double)got, (double)want);
                    }
            }
        }
        /* activations: the layout from floats and from q8_K blocks */
        float *xf = malloc(sizeof(float) * n);
        nx_block_q8_K *ref = malloc(sizeof(nx_block_q8_K) * nb);
        const size_t bytes = p->row_bytes(n);
        assert_int_equal(bytes, (size_t)nsteps * step_bytes);
        unsigned char *row = malloc(bytes), *row2 = malloc(bytes);
        for (int dist = 0; dist < DIST_COUNT; dist++) {
            fill_dist(xf, n, dist, 1e15f, &rng);
            nx_type_get(NX_TYPE_Q8_K)->from_float(xf, ref, n);
            memset(row, 0xAB, bytes); /* every byte must be written */
            p->prepare(xf, row, n);
            for (int64_t is = 0; is < nsteps; is++) {
                const unsigned char *st = row + step_bytes * is;
                for (int l = 0; l < 16; l++) {
                    int64_t sb = 0;
                    const bool zero = kp_element(type, nb, is, 0, l, 0, &sb) < 0;
                    for (int v = 0; v < (six ? 4 : 8); v++)
                        for (int u = 0; u < 4; u++) {
                            const int e = kp_element(type, nb, is, v, l, u, &sb);
                            assert_int_equal((int8_t)st[64 * v + 4 * l + u], zero ? 0 : ref[sb].qs[e]);
                        }
                    const size_t sums = six ? 256 : 512, dys = six ? 320 : 576;
                    float dy;
                    memcpy(&dy, st + dys + 4 * l, 4);
                    if (six) {
                        int32_t got;
                        memcpy(&got, st + sums + 4 * l, 4);
                        assert_int_equal(got, -32 * ref[sb].bsums[l]);
                    } else {
                        float got;
                        memcpy(&got, st + sums + 4 * l, 4);
                        const int j = l % 8;
                        volatile float want =
                            zero ? 0.0f : ref[sb].d * (float)(ref[sb].bsums[2 * j] + ref[sb].bsums[2 * j + 1]);
                        assert_true(memcmp(&got, (const float *)&want, 4) == 0);
                    }
                    const float want_dy = zero ? 0.0f : ref[sb].d;
                    assert_true(memcmp(&dy, &want_dy, 4) == 0);
                }
            }
            memset(row2, 0xCD, bytes);
            if (six) nx_prep_q8_K_q6_from_blocks(ref, row2, n);
            else nx_prep_q8_K_from_blocks(ref, row2, n);
            assert_memory_equal(row, row2, bytes);
        }
        free(w), free(deq), free(xf), free(ref), free(row), free(row2);
    }
}

/* Codes the activation quantiser never makes (-128) and constant extremes, written straight
 * into both layouts: the prepared kernel must still equal the scalar one. */
static void test_prepared_q8_0_extreme_codes(void **state) {
    (void)state;
    const nx_prepared_dot *p = q8_0_prepared();
    if (!p) skip();
    const int64_t nb = 45, n = nb * 32; /* 2 groups of 16, a whole octet, 5 blocks */
    tu_rng rng;
    tu_rng_seed(&rng, 77);
    nx_block_q8_0 *w = malloc(sizeof(nx_block_q8_0) * nb), *x = malloc(sizeof(nx_block_q8_0) * nb * 4);
    unsigned char *xp = malloc(p->row_bytes(n) * 4);
    const size_t prow = p->row_bytes(n);
    for (int pattern = 0; pattern < 4; pattern++) {
        for (int64_t b = 0; b < nb; b++) {
            w[b].d = rand_scale(&rng);
            for (int j = 0; j < 32; j++) {
                const int8_t rnd = (int8_t)tu_rng_u64(&rng);
                w[b].qs[j] = pattern == 1 ? -128 : pattern == 2 ? 127 : rnd;
            }
        }
        for (int r = 0; r < 4; r++) {
            for (int64_t b = 0; b < nb; b++) {
                nx_block_q8_0 *xb = &x[r * nb + b];
                xb->d = rand_scale(&rng);
                for (int j = 0; j < 32; j++) {
                    const int8_t rnd = (int8_t)tu_rng_u64(&rng);
                    xb->qs[j] = pattern == 0 ? rnd : pattern == 3 ? (j & 1 ? 127 : -128) : -128;
                }
            }
            /* the prepared layout straight from the blocks (checked by test_prepared_q8_0_layout) */
            nx_prep_q8_0_from_blocks(&x[r * nb], xp + r * prow, n);
        }
        for (int nrows = 1; nrows <= 4; nrows++) {
            float want[4], got[4];
            nx_type_get(NX_TYPE_Q8_0)->vec_dot[NX_ISA_SCALAR](n, want, w, x, sizeof(nx_block_q8_0) * nb, nrows);
            p->dot(n, got, w, xp, prow, nrows);
            for (int r = 0; r < nrows; r++) {
                double mag = 0;
                for (int64_t b = 0; b < nb; b++)
                    for (int j = 0; j < 32; j++)
                        mag += fabs((double)nx_f16_to_f32(w[b].d) * w[b].qs[j] *
                                    nx_f16_to_f32(x[r * nb + b].d) * x[r * nb + b].qs[j]);
                const double tol = 2.0 * (nb + 8) * 0x1p-24 * mag + 1e-30;
                if (!(fabs((double)got[r] - want[r]) <= tol)) {
                    print_error("prepared q8_0 pattern %d nrows %d row %d: %.9g vs scalar %.9g (tol %g)\n", pattern,
                                nrows, r, got[r], want[r], tol);
                    fail();
                }
                checks_done++;
            }
        }
    }
    free(w);
    free(x);
    free(xp);
}

static int teardown_report(void **state) {
    (void)state;
    print_message("%d kernel comparisons done\n", checks_done);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_avx2_kernels_match_scalar),
        cmocka_unit_test(test_avx512_kernels_match_scalar),
        cmocka_unit_test(test_strided_rows),
        cmocka_unit_test(test_prepared_q8_0_layout),
        cmocka_unit_test(test_prepared_k_layout),
        cmocka_unit_test(test_prepared_q8_0_extreme_codes),
    };
    return cmocka_run_group_tests(tests, NULL, teardown_report);
}
