/* test_matmul.c - nx_matmul against double-precision references, for every weight type with a
 * dot kernel and T in {1,2,3,4,5,8,9,17}, on 1 and 3 threads, at every ISA level this CPU has. */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quant/matmul.h"
#include "quant/matmul_groups.h"

static const nx_type types[] = {NX_TYPE_F32,  NX_TYPE_F16,  NX_TYPE_BF16, NX_TYPE_Q4_0,
                                NX_TYPE_Q4_1, NX_TYPE_Q5_0, NX_TYPE_Q5_1, NX_TYPE_Q8_0,
                                NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_Q2_K,
                                NX_TYPE_Q3_K, NX_TYPE_IQ4_NL, NX_TYPE_IQ4_XS};
static const int64_t Ts[] = {1, 2, 3, 4, 5, 8, 9, 17};

#define IN 512
#define OUT 45 /* not a multiple of the 16-row blocks */
#define TMAX 17

/* Bound on |x - dequant(quant(x))| for the activation formats, per element, from the format:
 * q8_0/q8_1/q8_K round to a grid of amax/127 per block (half a step), plus the fp16 rounding
 * of the scale for q8_0/q8_1 (127 steps * 2^-11 relative); f16/bf16 round to 11/8 bits. */
static double act_error_bound(nx_type act, const float *x, int64_t i) {
    int64_t bs = act == NX_TYPE_Q8_K ? 256 : 32;
    double amax = 0;
    for (int64_t j = i / bs * bs; j < i / bs * bs + bs; j++) amax = fmax(amax, fabs(x[j]));
    switch (act) {
    case NX_TYPE_Q8_K: return amax / 127 * 0.5 * 1.0001;
    case NX_TYPE_Q8_0:
    case NX_TYPE_Q8_1: return amax / 127 * 0.5 * 1.0001 + amax * 0x1p-11;
    case NX_TYPE_F16: return fabs(x[i]) * 0x1p-11;
    case NX_TYPE_BF16: return fabs(x[i]) * 0x1p-8;
    default: return 0;
    }
}

static void run_all(nx_pool *pool, nx_isa isa, float *w_f, float *x, float *y) {
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const nx_type_traits *tt = nx_type_get(types[ti]);
        const nx_type_traits *ta = nx_type_get(tt->vec_dot_type);
        size_t rowb;
        assert_true(nx_row_size(types[ti], IN, &rowb, NULL));
        char *wq = malloc(rowb * OUT);
        for (int o = 0; o < OUT; o++) tt->from_float(w_f + o * IN, wq + o * rowb, IN);
        float *wd = malloc(sizeof(float) * IN * OUT);
        for (int o = 0; o < OUT; o++) tt->to_float(wq + o * rowb, wd + o * IN, IN);
        nx_weight w;
        nx_err e;
        assert_true(nx_weight_init(&w, wq, types[ti], IN, OUT, &e));
        nx_matmul_scratch scratch = {0};
        size_t arow;
        assert_true(nx_row_size(tt->vec_dot_type, IN, &arow, NULL));
        char *xa = malloc(arow);
        float *xd = malloc(sizeof(float) * IN), *xb = malloc(sizeof(float) * IN);
        for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
            const int64_t T = Ts[k];
            memset(y, 0xFF, sizeof(float) * TMAX * OUT); /* NaN: catches unwritten outputs */
            assert_true(nx_matmul_isa(pool, &scratch, &w, x, T, y, isa, &e));
            for (int64_t t = 0; t < T; t++) {
                /* the activations as the kernel sees them, and their error bound */
                ta->from_float(x + t * IN, xa, IN);
                ta->to_float(xa, xd, IN);
                for (int i = 0; i < IN; i++) xb[i] = act_error_bound(tt->vec_dot_type, x + t * IN, i);
                for (int o = 0; o < OUT; o++) {
                    double tight = 0, loose = 0, mag = 0, act_err = 0, s_err = 0;
                    if (tt->vec_dot_type == NX_TYPE_Q8_1) {
                        /* q4_1/q5_1 use q8_1's s = dy*sum(q) stored in fp16 for the min term m*s;
                         * m is the block's smallest dequantised weight (the minimum element
                         * gets code 0), |s| <= sum |xd| */
                        for (int b = 0; b < IN / 32; b++) {
                            double m = 0, sx = 0;
                            for (int i = 32 * b; i < 32 * b + 32; i++) {
                                m = i == 32 * b ? wd[o * IN + i] : fmin(m, wd[o * IN + i]);
                                sx += fabs(xd[i]);
                            }
                            s_err += fabs(m) * sx * 0x1p-11;
                        }
                    }
                    for (int i = 0; i < IN; i++) {
                        tight += (double)wd[o * IN + i] * xd[i];
                        loose += (double)wd[o * IN + i] * x[t * IN + i];
                        mag += fabs((double)wd[o * IN + i] * xd[i]);
                        act_err += fabs(wd[o * IN + i]) * xb[i];
                    }
                    const double got = y[t * OUT + o];
                    /* (1) against dequantised weights x quantised activations: only float
                     * rounding of block partial sums, plus s_err */
                    const double tol_tight = 2e-5 * mag + 1e-6 + s_err;
                    /* (2) against dequantised weights x the float activations: plus the
                     * activation quantisation error bound */
                    const double tol_loose = tol_tight + act_err;
                    if (!(fabs(got - tight) <= tol_tight) || !(fabs(got - loose) <= tol_loose)) {
                        print_error("%s T=%lld t=%lld o=%d threads=%d isa=%s: got %.9g, want %.9g (tol %g) / "
                                    "%.9g (tol %g)\n",
                                    tt->name, (long long)T, (long long)t, o, nx_pool_size(pool),
                                    nx_isa_name(isa), got, tight, tol_tight, loose, tol_loose);
                        fail();
                    }
                }
            }
        }
        nx_matmul_scratch_free(&scratch);
        free(wq);
        free(wd);
        free(xa);
        free(xd);
        free(xb);
    }
}

static void fill(float *v, int64_t n, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int64_t i = 0; i < n; i++) v[i] = tu_rng_normal(&r);
}

static void test_matmul_all_types_all_T(void **state) {
    (void)state;
    float *w = malloc(sizeof(float) * IN * OUT), *x = malloc(sizeof(float) * IN * TMAX);
    float *y = malloc(sizeof(float) * TMAX * OUT);
    fill(w, IN * OUT, 1);
    fill(x, IN * TMAX, 2);
    const nx_isa best = nx_cpu_isa();
    for (int isa = 0; isa <= (int)best; isa++) {
        run_all(NULL, (nx_isa)isa, w, x, y); /* no pool: single thread */
        nx_pool *p = nx_pool_create(3, NULL);
        run_all(p, (nx_isa)isa, w, x, y);
        nx_pool_free(p);
    }
    free(w);
    free(x);
    free(y);
}

/* The thread count must not change a single bit of the result. */
static void test_matmul_thread_count_invariant(void **state) {
    (void)state;
    const int64_t in = 1024, out = 333, T = 5;
    float *wf = malloc(sizeof(float) * in * out), *x = malloc(sizeof(float) * in * T);
    float *y1 = malloc(sizeof(float) * T * out), *y3 = malloc(sizeof(float) * T * out);
    fill(wf, in * out, 3);
    fill(x, in * T, 4);
    size_t rowb;
    assert_true(nx_row_size(NX_TYPE_Q4_K, in, &rowb, NULL));
    char *wq = malloc(rowb * out);
    for (int64_t o = 0; o < out; o++) nx_type_get(NX_TYPE_Q4_K)->from_float(wf + o * in, wq + o * rowb, in);
    nx_weight w;
    assert_true(nx_weight_init(&w, wq, NX_TYPE_Q4_K, in, out, NULL));
    nx_matmul_scratch s = {0};
    nx_pool *p3 = nx_pool_create(3, NULL);
    assert_true(nx_matmul(NULL, &s, &w, x, T, y1, NULL));
    assert_true(nx_matmul(p3, &s, &w, x, T, y3, NULL));
    assert_memory_equal(y1, y3, sizeof(float) * T * out);
    nx_pool_free(p3);
    nx_matmul_scratch_free(&s);
    free(wf);
    free(x);
    free(y1);
    free(y3);
    free(wq);
}

/* Batch invariance: row t of a T-row product is bit-identical to the 1-row product of row t, at
 * every ISA level (each kernel computes every row of a group with the same instruction
 * sequence).  Speculative verification relies on this: a 4-row batch scores each position
 * exactly as decoding it alone would.  T = 2..9: the vec-dot kernels' row groups (verify
 * batches; 9 = a full group of 8 and one more); 17 >= NX_GEMM_MIN_T: the GEMM path. */
static void test_matmul_batch_invariant(void **state) {
    (void)state;
    static const int64_t Tb[] = {2, 3, 4, 5, 6, 7, 8, 9, TMAX};
    _Static_assert(TMAX >= NX_GEMM_MIN_T, "batch must reach the GEMM path");
    float *wf = malloc(sizeof(float) * IN * OUT), *x = malloc(sizeof(float) * IN * TMAX);
    float *yb = malloc(sizeof(float) * TMAX * OUT), *y1 = malloc(sizeof(float) * OUT);
    fill(wf, IN * OUT, 5);
    fill(x, IN * TMAX, 6);
    nx_pool *p = nx_pool_create(2, NULL);
    const nx_isa best = nx_cpu_isa();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const nx_type_traits *tt = nx_type_get(types[ti]);
        size_t rowb;
        assert_true(nx_row_size(types[ti], IN, &rowb, NULL));
        char *wq = malloc(rowb * OUT);
        for (int o = 0; o < OUT; o++) tt->from_float(wf + o * IN, wq + o * rowb, IN);
        nx_weight w;
        assert_true(nx_weight_init(&w, wq, types[ti], IN, OUT, NULL));
        nx_matmul_scratch s = {0};
        for (int isa = 0; isa <= (int)best; isa++) {
            for (size_t bi = 0; bi < sizeof Tb / sizeof Tb[0]; bi++) {
                const int64_t T = Tb[bi];
                assert_true(nx_matmul_isa(p, &s, &w, x, T, yb, (nx_isa)isa, NULL));
                for (int64_t t = 0; t < T; t++) {
                    assert_true(nx_matmul_isa(p, &s, &w, x + t * IN, 1, y1, (nx_isa)isa, NULL));
                    if (memcmp(y1, yb + t * OUT, sizeof(float) * OUT) != 0) {
                        print_error("%s isa=%s: row %lld of a %lld-row batch differs from the same row alone\n",
                                    tt->name, nx_isa_name((nx_isa)isa), (long long)t, (long long)T);
                        fail();
                    }
                }
            }
        }
        nx_matmul_scratch_free(&s);
        free(wq);
    }
    nx_pool_free(p);
    free(wf);
    free(x);
    free(yb);
    free(y1);
}

/* f32 weights at AVX-512 go through the 16-row grouped kernel (matmul_f32.h); every element
 * must equal the 1-row vec-dot kernel nx_dot_f32_avx512 bit for bit (same FMA chains, same
 * reduction tree), for row lengths around the 16/32-element steps (masked tails), row counts
 * that are not multiples of 16, every tile size, and 1 or 2 threads.  Inputs include zeros,
 * tiny and huge magnitudes so rounding differences in the tree would show. */
static void test_matmul_f32_groups_equal_vec_dot(void **state) {
    (void)state;
    if (nx_cpu_isa() < NX_ISA_AVX512) skip();
    const nx_vec_dot_fn dot = nx_vec_dot_for(NX_TYPE_F32, NX_ISA_AVX512);
    assert_non_null(dot);
    static const int64_t ins[] = {1, 7, 16, 17, 31, 32, 33, 48, 128, 200, 384};
    static const int64_t outs[] = {1, 4, 15, 16, 17, 33, 128};
    enum { TM = 9 };
    nx_pool *pools[2] = {nx_pool_create(1, NULL), nx_pool_create(2, NULL)};
    tu_rng r;
    tu_rng_seed(&r, 42);
    for (size_t a = 0; a < sizeof ins / sizeof ins[0]; a++)
        for (size_t b = 0; b < sizeof outs / sizeof outs[0]; b++) {
            const int64_t in = ins[a], out = outs[b];
            float *w = malloc(sizeof(float) * in * out), *x = malloc(sizeof(float) * in * TM);
            float *y = malloc(sizeof(float) * out * TM);
            for (int64_t i = 0; i < in * out; i++) {
                const double v = tu_rng_normal(&r);
                w[i] = i % 11 == 0 ? 0.0f : (float)(i % 5 == 0 ? v * 1e6 : i % 7 == 0 ? v * 1e-6 : v);
            }
            for (int64_t i = 0; i < in * TM; i++) x[i] = (float)tu_rng_normal(&r);
            nx_weight wt;
            assert_true(nx_weight_init(&wt, w, NX_TYPE_F32, in, out, NULL));
            for (int pi = 0; pi < 2; pi++)
                for (int64_t T = 1; T <= TM; T++) {
                    memset(y, 0xFF, sizeof(float) * out * TM);
                    assert_true(nx_matmul(pools[pi], &(nx_matmul_scratch){0}, &wt, x, T, y, NULL));
                    for (int64_t t = 0; t < T; t++)
                        for (int64_t o = 0; o < out; o++) {
                            float want;
                            dot(in, &want, w + o * in, x + t * in, 0, 1);
                            if (memcmp(&want, &y[t * out + o], sizeof want) != 0) {
                                print_error("f32 in=%lld out=%lld T=%lld threads=%d: y[%lld][%lld] = %.9g, "
                                            "vec-dot %.9g\n", (long long)in, (long long)out, (long long)T, pi + 1,
                                            (long long)t, (long long)o, y[t * out + o], want);
                                fail();
                            }
                        }
                }
            free(w);
            free(x);
            free(y);
        }
    nx_pool_free(pools[0]);
    nx_pool_free(pools[1]);
}

/* nx_matmul_groups converts each distinct list of activation rows once per activation layout and
 * lets later groups read it: groups that read the same rows (same array, stride, count and
 * indices; an index list equal to the identity counts as the same as no list) must give exactly
 * nx_matmul of their own rows, and groups that differ only in the row order, the row count, the
 * stride or the layout their weight type wants must not borrow another group's conversion. */
static void test_groups_share_converted_rows(void **state) {
    (void)state;
    enum { IN2 = 512, NG = 10, TX = 4 };
    const nx_type wt[NG] = {NX_TYPE_Q8_0, NX_TYPE_Q8_0, NX_TYPE_Q8_0, NX_TYPE_Q8_0, NX_TYPE_Q4_K,
                            NX_TYPE_Q4_K, NX_TYPE_Q8_0, NX_TYPE_Q6_K, NX_TYPE_Q8_0, NX_TYPE_Q8_0};
    static const int32_t r012[3] = {0, 1, 2}, r012b[3] = {0, 1, 2}, r210[3] = {2, 1, 0}, r01[2] = {0, 1};
    static const int32_t r3[1] = {3};
    /* per group: the row list, the row count, the stride in floats */
    const int32_t *rl[NG] = {r012, r012b, NULL, r210, r012, NULL, r01, r012, r3, r01};
    const int64_t Tg[NG] = {3, 3, 3, 3, 3, 3, 2, 3, 1, 2};
    const int64_t st[NG] = {IN2, IN2, IN2, IN2, IN2, IN2, IN2, IN2, IN2, 2 * IN2};
    float *x = malloc(sizeof(float) * IN2 * TX), *wf = malloc(sizeof(float) * IN2 * OUT);
    fill(x, IN2 * TX, 21);
    fill(wf, IN2 * OUT, 22);
    char *wq[NG];
    nx_mm_group g[NG];
    float *y[NG], *want = malloc(sizeof(float) * 3 * OUT), *xg = malloc(sizeof(float) * IN2 * 3);
    for (int i = 0; i < NG; i++) {
        size_t rowb;
        assert_true(nx_row_size(wt[i], IN2, &rowb, NULL));
        wq[i] = malloc(rowb * OUT);
        /* a different matrix per group (rows shifted by i) so a borrowed output would show */
        for (int o = 0; o < OUT; o++)
            nx_type_get(wt[i])->from_float(wf + ((o + i) % OUT) * IN2, wq[i] + o * rowb, IN2);
        y[i] = malloc(sizeof(float) * 3 * OUT);
        g[i] = (nx_mm_group){.x = x, .x_stride = st[i], .rows = rl[i], .T = Tg[i], .y = y[i]};
        assert_true(nx_weight_init(&g[i].w, wq[i], wt[i], IN2, OUT, NULL));
    }
    nx_pool *p = nx_pool_create(2, NULL);
    nx_mm_groups_scratch s = {0};
    nx_matmul_scratch ms = {0};
    const nx_isa best = nx_cpu_isa();
    for (int isa = 0; isa <= (int)best; isa++) {
        for (int i = 0; i < NG; i++) memset(y[i], 0xFF, sizeof(float) * 3 * OUT);
        assert_true(nx_matmul_groups_isa(p, &s, g, NG, (nx_isa)isa, NULL));
        for (int i = 0; i < NG; i++) {
            for (int64_t t = 0; t < Tg[i]; t++)
                memcpy(xg + t * IN2, x + (rl[i] ? rl[i][t] : t) * st[i], sizeof(float) * IN2);
            assert_true(nx_matmul_isa(NULL, &ms, &g[i].w, xg, Tg[i], want, (nx_isa)isa, NULL));
            if (memcmp(want, y[i], sizeof(float) * (size_t)Tg[i] * OUT) != 0) {
                print_error("isa=%s: group %d (%s) differs from nx_matmul of its own rows\n",
                            nx_isa_name((nx_isa)isa), i, nx_type_name(wt[i]));
                fail();
            }
        }
    }
    nx_pool_free(p);
    nx_mm_groups_scratch_free(&s);
    nx_matmul_scratch_free(&ms);
    for (int i = 0; i < NG; i++) {
        free(wq[i]);
        free(y[i]);
    }
    free(x);
    free(wf);
    free(want);
    free(xg);
}

/* Operands of the kernel-equality tests: nw weight rows of n elements with huge and tiny block
 * scales (so that a change in the order of float operations shows), quantised into wq (rowb bytes
 * a row), then nx activation rows x with a few large entries; one seeded stream, weights first. */
static void fill_kernel_operands(const nx_type_traits *tt, int64_t n, int nw, int nx, uint64_t seed, char *wq,
                                 size_t rowb, float *x) {
    float *wf = malloc(sizeof(float) * n * nw);
    assert_non_null(wf);
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int64_t i = 0; i < n * nw; i++) {
        const double v = tu_rng_normal(&r);
        const int64_t blk = i / 32;
        wf[i] = (float)(blk % 5 == 1 ? v * 3e3 : blk % 7 == 2 ? v * 1e-3 : v);
    }
    for (int64_t i = 0; i < n * nx; i++) x[i] = (float)tu_rng_normal(&r) * (i % 97 == 0 ? 50.0f : 1.0f);
    for (int m = 0; m < nw; m++) tt->from_float(wf + m * n, wq + m * rowb, n);
    free(wf);
}

/* The multi-weight-row kernels (nx_prepared_dot.dot_w: several weight rows against one
 * activation row, what a decoded token's matmul runs) give every weight row exactly the bits of
 * the one-row kernel of the same entry, for every row count (the tiles of 4 and the tails),
 * rows that end in a partial octet / group (q4_K / q5_K: odd super-block counts, the half-empty
 * last pair), and weights with huge and tiny scales so that any
 * change in the order of the float operations would show. */
static void test_multi_weight_row_kernels_equal_one_row(void **state) {
    (void)state;
    static const int64_t ns[] = {32, 64, 256, 288, 512, 544, 768, 1024, 1280, 3584, 4096};
    enum { NWMAX = 11 };
    int checked = 0;
    for (int ty = 0; ty < NX_TYPE_COUNT; ty++) {
        const nx_type_traits *tt = nx_type_get((uint32_t)ty);
        if (!tt) continue;
        for (int isa = 0; isa <= (int)nx_cpu_isa(); isa++) {
            const nx_prepared_dot *pd = &tt->prepared[isa];
            if (!pd->dot_w) continue;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int64_t n = ns[ni];
                size_t rowb;
                if (n % tt->block_size || !nx_row_size((uint32_t)ty, n, &rowb, NULL)) continue;
                float *x = malloc(sizeof(float) * n);
                char *wq = malloc(rowb * NWMAX), *xp = nx_alloc_aligned(pd->row_bytes(n) + 64, "test", NULL);
                fill_kernel_operands(tt, n, NWMAX, 1, (uint64_t)(n * 31 + ty), wq, rowb, x);
                pd->prepare(x, xp, n);
                for (int nw = 1; nw <= NWMAX; nw++) {
                    float got[NWMAX], want;
                    memset(got, 0xFF, sizeof got);
                    pd->dot_w(n, got, wq, rowb, xp, nw);
                    for (int m = 0; m < nw; m++) {
                        pd->dot(n, &want, wq + m * rowb, xp, 0, 1);
                        if (memcmp(&want, &got[m], sizeof want) != 0) {
                            print_error("%s isa=%s n=%lld nw=%d: weight row %d gives %.9g, the one-row kernel "
                                        "%.9g\n", tt->name, nx_isa_name((nx_isa)isa), (long long)n, nw, m,
                                        got[m], want);
                            fail();
                        }
                    }
                    checked++;
                }
                free(x);
                free(wq);
                nx_free_aligned(xp);
            }
        }
    }
    if (nx_cpu_isa() >= NX_ISA_AVX512) assert_true(checked > 0); /* q8_0, q4_K, q5_K, q6_K have one at AVX-512 */
    else print_message("no multi-weight-row kernel at this CPU's ISA level: nothing to check\n");
}

/* The tile kernels (nx_prepared_dot.dot_tile: several weight rows against several activation
 * rows, what a verify batch's matmul runs) give every (weight row, activation row) exactly the
 * bits of the one-row kernel of the same entry, for activation row counts 1..9 (every group size
 * of 8 and a second group), weight row counts of one, four (the hsum groups), five and sixteen
 * (nx_matmul's block), row lengths with odd super-block counts (the half-empty last pair of
 * q4_K / q5_K) and the decode shapes (768, 1024, 1280, 3584), an output stride wider than the
 * tile (nothing written outside it), and weights with huge and tiny scales so that any change
 * in the order of the float operations would show. */
static void test_tile_kernels_equal_one_row(void **state) {
    (void)state;
    static const int64_t ns[] = {256, 512, 768, 1024, 1280, 3584};
    static const int nws[] = {1, 4, 5, 16};
    enum { NWMAX = 16, RMAX = 9, PAD = 3 };
    int checked = 0;
    for (int ty = 0; ty < NX_TYPE_COUNT; ty++) {
        const nx_type_traits *tt = nx_type_get((uint32_t)ty);
        if (!tt) continue;
        for (int isa = 0; isa <= (int)nx_cpu_isa(); isa++) {
            const nx_prepared_dot *pd = &tt->prepared[isa];
            if (!pd->dot_tile) continue;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int64_t n = ns[ni];
                size_t rowb;
                if (n % tt->block_size || !nx_row_size((uint32_t)ty, n, &rowb, NULL)) continue;
                const size_t xrow = pd->row_bytes(n) + 64; /* a stride wider than the row */
                float *x = malloc(sizeof(float) * n * RMAX);
                char *wq = malloc(rowb * NWMAX), *xp = nx_alloc_aligned(xrow * RMAX, "test", NULL);
                fill_kernel_operands(tt, n, NWMAX, RMAX, (uint64_t)(n * 37 + ty), wq, rowb, x);
                for (int t = 0; t < RMAX; t++) pd->prepare(x + t * n, xp + t * xrow, n);
                float want[RMAX][NWMAX];
                for (int t = 0; t < RMAX; t++)
                    for (int m = 0; m < NWMAX; m++) pd->dot(n, &want[t][m], wq + m * rowb, xp + t * xrow, 0, 1);
                for (size_t wi = 0; wi < sizeof nws / sizeof nws[0]; wi++) {
                    const int nw = nws[wi];
                    const size_t os = (size_t)nw + PAD;
                    for (int nr = 1; nr <= RMAX; nr++) {
                        float got[RMAX * (NWMAX + PAD)];
                        memset(got, 0xFF, sizeof got);
                        pd->dot_tile(n, got, os, wq, rowb, nw, xp, xrow, nr);
                        for (int t = 0; t < RMAX; t++)
                            for (int m = 0; m < (int)os; m++) {
                                const float *g = &got[(size_t)t * os + (size_t)m];
                                if (t < nr && m < nw) {
                                    if (memcmp(&want[t][m], g, sizeof *g) != 0) {
                                        print_error("%s isa=%s n=%lld nw=%d nrows=%d: weight row %d, activation "
                                                    "row %d gives %.9g, the one-row kernel %.9g\n",
                                                    tt->name, nx_isa_name((nx_isa)isa), (long long)n, nw, nr, m, t,
                                                    *g, want[t][m]);
                                        fail();
                                    }
                                } else {
                                    uint32_t bits;
                                    memcpy(&bits, g, sizeof bits);
                                    if (bits != 0xFFFFFFFFu) {
                                        print_error("%s n=%lld nw=%d nrows=%d: wrote outside the tile at (%d, %d)\n",
                                                    tt->name, (long long)n, nw, nr, t, m);
                                        fail();
                                    }
                                }
                            }
                        checked++;
                    }
                }
                free(x);
                free(wq);
                nx_free_aligned(xp);
            }
        }
    }
    if (nx_cpu_isa() >= NX_ISA_AVX512) assert_true(checked > 0); /* q4_K, q5_K, q6_K have one at AVX-512 */
    else print_message("no tile kernel at this CPU's ISA level: nothing to check\n");
}

static void test_weight_init_errors(void **state) {
    (void)state;
    nx_weight w;
    nx_err e;
    char buf[64] = {0};
    assert_false(nx_weight_init(&w, buf, 99, 32, 1, &e));
    assert_non_null(strstr(e.msg, "99"));
    assert_false(nx_weight_init(&w, buf, NX_TYPE_Q4_K, 100, 1, &e));
    assert_non_null(strstr(e.msg, "256"));
    assert_false(nx_weight_init(&w, buf, NX_TYPE_Q8_K, 256, 1, &e)); /* activation-only format */
    assert_non_null(strstr(e.msg, "q8_K"));
    assert_false(nx_weight_init(&w, buf, NX_TYPE_F32, 0, 1, &e));
    assert_false(nx_weight_init(&w, NULL, NX_TYPE_F32, 4, 1, &e));
    assert_false(nx_weight_init(&w, buf, NX_TYPE_F32, INT64_MAX / 2, INT64_MAX / 2, &e));
    assert_true(nx_weight_init(&w, buf, NX_TYPE_F16, 8, 2, &e));
    assert_int_equal(w.row_bytes, 16);
    float x[8] = {0}, y[2];
    assert_true(nx_matmul(NULL, &(nx_matmul_scratch){0}, &w, x, 0, y, &e)); /* T = 0: nothing to do */
    assert_false(nx_matmul(NULL, &(nx_matmul_scratch){0}, &w, x, -1, y, &e));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_all_types_all_T),
        cmocka_unit_test(test_matmul_thread_count_invariant),
        cmocka_unit_test(test_matmul_batch_invariant),
        cmocka_unit_test(test_matmul_f32_groups_equal_vec_dot),
        cmocka_unit_test(test_groups_share_converted_rows),
        cmocka_unit_test(test_multi_weight_row_kernels_equal_one_row),
        cmocka_unit_test(test_tile_kernels_equal_one_row),
        cmocka_unit_test(test_weight_init_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
