/* ops_avx512.c - AVX-512 kernels for the trunk (see ops_avx512.h).  Compiled with AVX-512 flags;
 * never called unless the CPU has AVX-512. */
#include "forward/ops_avx512.h"

#include <immintrin.h>

float nx_ops_dot_f32_avx512(const float *a, const float *b, int64_t n) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16) acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

float nx_ops_dot_f16_avx512(const uint16_t *a, const float *b, int64_t n) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512 x0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i)));
        __m512 x1 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i + 16)));
        acc0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(b + i), acc0);
        acc1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(b + i + 16), acc1);
    }
    for (; i + 16 <= n; i += 16)
        acc0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(a + i))), _mm512_loadu_ps(b + i), acc0);
    float s = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
    for (; i < n; i++) s += _cvtsh_ss(a[i]) * b[i];
    return s;
}

void nx_ops_axpy_f32_avx512(float *y, float a, const float *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += a * x[i];
}

void nx_ops_axpy_f16_avx512(float *y, float a, const uint16_t *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 xv = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(x + i)));
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, xv, _mm512_loadu_ps(y + i)));
    }
    for (; i < n; i++) y[i] += a * _cvtsh_ss(x[i]);
}

/* The sum of a vector's 16 lanes, added in the tree order of GCC's _mm512_reduce_add_ps (lane i
 * + lane i+8, then i + i+4, then i + i+2, then lane 0 + lane 1), written out so that the delta
 * rule's sums do not depend on a compiler's choice of tree; hsum16x8 gives the same bits for
 * eight vectors at once. */
static inline float hsum16(__m512 a) {
    const __m256 y = _mm256_add_ps(_mm512_extractf32x8_ps(a, 1), _mm512_castps512_ps256(a));
    const __m128 z = _mm_add_ps(_mm256_extractf128_ps(y, 1), _mm256_castps256_ps128(y));
    const __m128 w = _mm_add_ps(z, _mm_shuffle_ps(z, z, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_add_ss(w, _mm_shuffle_ps(w, w, 1)));
}

/* Lane r (r < 8) of the result = hsum16(a[r]), by the same additions on the same operands
 * (a + b and b + a round alike), eight rows side by side: level 1 pairs 256-bit halves of two
 * rows per instruction, level 2 128-bit quarters of four rows, levels 3 and 4 within 128-bit
 * lanes.  24 shuffles and additions instead of 8 x 8. */
static inline __m256 hsum16x8(const __m512 a[8]) {
    __m512 b[4], c[2];
    for (int p = 0; p < 4; p++) /* b[p]: lanes 0-7 row 2p, 8-15 row 2p+1: y_i = a_i + a_{i+8} */
        b[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)),
                             _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)));
    for (int p = 0; p < 2; p++) /* c[p]: quarter m row 4p+m: z_i = y_i + y_{i+4} */
        c[p] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * p], b[2 * p + 1], _MM_SHUFFLE(3, 1, 3, 1)),
                             _mm512_shuffle_f32x4(b[2 * p], b[2 * p + 1], _MM_SHUFFLE(2, 0, 2, 0)));
    /* quarter m: w_0, w_1 of row m, then of row m+4 (w_i = z_i + z_{i+2}) */
    const __m512 e = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(3, 2, 3, 2)),
                                   _mm512_shuffle_ps(c[0], c[1], _MM_SHUFFLE(1, 0, 1, 0)));
    /* w_0 + w_1: row m in lane 4m, row m+4 in lane 4m+2 */
    const __m512 f = _mm512_add_ps(e, _mm512_shuffle_ps(e, e, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, f));
}

void nx_gdn_step_avx512(const float *src, float *dst, const float *k, const float *q, const float *v,
                        float decay, float beta, float *o, int d) {
    const __m512 vdecay = _mm512_set1_ps(decay);
    for (int j = 0; j < d; j++) {
        const float *s = src + (size_t)j * d;
        float *t = dst + (size_t)j * d;
        __m512 acc = _mm512_setzero_ps();
        for (int i = 0; i < d; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(s + i), _mm512_loadu_ps(k + i), acc);
        const float u = decay * hsum16(acc);
        const __m512 vdelta = _mm512_set1_ps(beta * (v[j] - u));
        __m512 out = _mm512_setzero_ps();
        for (int i = 0; i < d; i += 16) {
            __m512 nv = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), vdelta, _mm512_mul_ps(vdecay, _mm512_loadu_ps(s + i)));
            _mm512_storeu_ps(t + i, nv);
            out = _mm512_fmadd_ps(nv, _mm512_loadu_ps(q + i), out);
        }
        o[j] = hsum16(out);
    }
}

/* A chain of delta-rule steps for one value head (ops_avx512.h), fused: each strip of eight
 * state rows (row j = the column S[.][j], d floats) is taken through the n steps in one pass
 * each, and stored only into the destinations the steps name.  A token step's float operations
 * per row are exactly nx_gdn_step_avx512's, in the same order, and a replay step repeats the
 * update with the recorded delta, so every stored state and every o value is bit-identical to
 * chained one-token steps (test_ops_simd checks this).
 * - Eight rows go through each step together: one row's step is a chain of dependent operations
 *   (the read <s_j, k>, a horizontal sum, the update, ...) and the next step needs its result;
 *   eight independent chains overlap their latencies, and k and q are loaded once for the eight.
 * - One pass per step: the update loop that produces the new s_j also accumulates <s_j, q> (this
 *   step's output) and <s_j, k'> (the next step's read, k' its key), with the same FMAs in the
 *   same order as a separate pass would do; only step 0's read is a pass of its own.
 * - Step 0 reads the rows straight from src (the state's one read from memory); the strip is
 *   kept in a local buffer (L1) only between steps, and not at all for a single step (decode),
 *   where the update goes straight from src to dst (in place when dst == src).
 * - The eight rows' horizontal sums are one transposed reduction (hsum16x8, same bits).
 * A destination other than src, 64-byte aligned, is written with streaming stores: it is
 * written whole and read again only in a later pass (after the whole model's weights have gone
 * through the caches), so reading its old lines first (read-for-ownership) would only add
 * memory traffic; a store into src itself (in-place update) stays an ordinary store of a line
 * already in cache.  The sfence at the end makes the streaming stores globally visible before
 * the function returns. */
enum { GDN_JB = 8 }; /* state rows per pass; d % 16 == 0 makes d a multiple of 2 * GDN_JB */

/* One step's pass over eight rows: row r at sp + r * ss, new rows into keep (stride d, the local
 * buffer) and dt (stride d; DST_STREAM: streaming stores), <s_j, q> into out, <s_j, kn> into
 * acc.  The flags are constants where it is inlined, so each combination is a loop of its own
 * without branches. */
enum { DST_NONE, DST_STORE, DST_STREAM };
static inline __attribute__((always_inline)) void
gdn_pass(const float *sp, size_t ss, float *keep, float *dt, const float *k, const float *q, const float *kn,
         __m512 vdecay, const float *dl, __m512 *out, __m512 *acc, int d, bool KEEP, int DST, bool Q, bool KN) {
    for (int r = 0; r < GDN_JB; r++) out[r] = acc[r] = _mm512_setzero_ps();
    for (int i = 0; i < d; i += 16) {
        const __m512 kv = _mm512_loadu_ps(k + i);
        const __m512 qv = Q ? _mm512_loadu_ps(q + i) : _mm512_setzero_ps();
        const __m512 knv = KN ? _mm512_loadu_ps(kn + i) : _mm512_setzero_ps();
        for (int r = 0; r < GDN_JB; r++) {
            const __m512 nv = _mm512_fmadd_ps(kv, _mm512_set1_ps(dl[r]),
                                              _mm512_mul_ps(vdecay, _mm512_loadu_ps(sp + (size_t)r * ss + i)));
            if (KEEP) _mm512_store_ps(keep + (size_t)r * (size_t)d + i, nv);
            if (DST == DST_STREAM) _mm512_stream_ps(dt + (size_t)r * (size_t)d + i, nv);
            if (DST == DST_STORE) _mm512_storeu_ps(dt + (size_t)r * (size_t)d + i, nv);
            if (Q) out[r] = _mm512_fmadd_ps(nv, qv, out[r]);
            if (KN) acc[r] = _mm512_fmadd_ps(nv, knv, acc[r]);
        }
    }
}

#define GDN_PASS_Q_KN(KEEP, DST)                                                                         \
    do {                                                                                                 \
        if (qt && kn) gdn_pass(sp, ss, keep, dt, x->k, qt, kn, vdecay, dl, out, acc, d, KEEP, DST, true, true);   \
        else if (qt) gdn_pass(sp, ss, keep, dt, x->k, qt, kn, vdecay, dl, out, acc, d, KEEP, DST, true, false);   \
        else if (kn) gdn_pass(sp, ss, keep, dt, x->k, qt, kn, vdecay, dl, out, acc, d, KEEP, DST, false, true);   \
        else gdn_pass(sp, ss, keep, dt, x->k, qt, kn, vdecay, dl, out, acc, d, KEEP, DST, false, false);          \
    } while (0)

/* How far ahead (in state rows) step 0 prefetches the rows it will read: the state comes from
 * memory once per pass over the model, and a strip pair's steps hide the next pair's misses. */
enum { GDN_PREFETCH_ROWS = 2 * GDN_JB };

void nx_gdn_chain_avx512(const float *src, const nx_gdn_step *st, int n, int d) {
    _Alignas(64) float s[2 * GDN_JB * 512]; /* d <= 512 (nx_hparams_finish); rows at stride d */
    _Alignas(32) float dl[GDN_JB];
    int dmode[NX_GDN_MAX_STEPS];
    bool any_stream = false;
    for (int t = 0; t < n; t++) {
        const bool stream = st[t].dst && st[t].dst != src && ((uintptr_t)st[t].dst & 63) == 0;
        dmode[t] = stream ? DST_STREAM : st[t].dst ? DST_STORE : DST_NONE;
        any_stream |= stream;
    }
    /* Two strips of eight rows (A = rows j.., B = rows j+8..) step by step in turn: a strip's
     * horizontal sums and deltas (a latency chain that its next step waits for) run while the
     * other strip's pass fills the FMA units. */
    for (int j = 0; j < d; j += 2 * GDN_JB) {
        for (int i = 0; i < 2 * GDN_JB * d; i += 16)
            _mm_prefetch((const char *)(src + ((size_t)j + GDN_PREFETCH_ROWS) * (size_t)d + i), _MM_HINT_T0);
        __m256 sum[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()}; /* <s_j, k> of the coming token step */
        if (st[0].q)
            for (int h = 0; h < 2; h++) {
                const float *s0 = src + ((size_t)j + (size_t)h * GDN_JB) * (size_t)d;
                __m512 acc[GDN_JB];
                for (int r = 0; r < GDN_JB; r++) acc[r] = _mm512_setzero_ps();
                for (int i = 0; i < d; i += 16) {
                    const __m512 kv = _mm512_loadu_ps(st[0].k + i);
                    for (int r = 0; r < GDN_JB; r++)
                        acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(s0 + (size_t)r * (size_t)d + i), kv, acc[r]);
                }
                sum[h] = hsum16x8(acc);
            }
        for (int t = 0; t < n; t++) {
            const nx_gdn_step *x = &st[t];
            const float *qt = x->q, *kn = t + 1 < n && st[t + 1].q ? st[t + 1].k : NULL;
            const __m512 vdecay = _mm512_set1_ps(x->decay);
            for (int h = 0; h < 2; h++) {
                const int jh = j + h * GDN_JB;
                if (qt) {
                    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(x->decay), sum[h]);
                    const __m256 delta = _mm256_mul_ps(_mm256_set1_ps(x->beta), _mm256_sub_ps(_mm256_loadu_ps(x->v + jh), u));
                    if (x->delta_out) _mm256_storeu_ps(x->delta_out + jh, delta);
                    _mm256_store_ps(dl, delta);
                } else {
                    _mm256_store_ps(dl, _mm256_loadu_ps(x->delta + jh));
                }
                /* this step's rows: src (step 0) or the local buffer */
                float *keep = s + (size_t)h * GDN_JB * (size_t)d;
                const float *sp = t == 0 ? src + (size_t)jh * (size_t)d : keep;
                const size_t ss = (size_t)d;
                float *dt = x->dst ? x->dst + (size_t)jh * (size_t)d : NULL;
                __m512 out[GDN_JB], acc[GDN_JB];
                if (n == 1) { /* decode: src -> dst only */
                    if (dmode[t] == DST_STREAM) GDN_PASS_Q_KN(false, DST_STREAM);
                    else if (dmode[t] == DST_STORE) GDN_PASS_Q_KN(false, DST_STORE);
                    else GDN_PASS_Q_KN(false, DST_NONE);
                } else {
                    if (dmode[t] == DST_STREAM) GDN_PASS_Q_KN(true, DST_STREAM);
                    else if (dmode[t] == DST_STORE) GDN_PASS_Q_KN(true, DST_STORE);
                    else GDN_PASS_Q_KN(true, DST_NONE);
                }
                if (qt) _mm256_storeu_ps(x->o + jh, hsum16x8(out));
                if (kn) sum[h] = hsum16x8(acc);
            }
        }
    }
    if (any_stream) _mm_sfence();
}

/* ---- activations ------------------------------------------------------------------------------
 * exp(x) = 2^n * e^r with n = round(x log2 e), r = x - n ln 2 (ln 2 split in a high part with
 * trailing zero bits and a low part, so n * ln2_hi is exact), |r| <= ln 2 / 2; e^r by its
 * Taylor polynomial to degree 7 (truncation < 0.35^8 / 8! = 5e-9 relative) in Horner form;
 * scalef applies 2^n with correct overflow to inf and gradual underflow to 0.  x is clamped to
 * [-104, 89] first (beyond, exp is 0 or inf in float anyway), which also keeps n finite; NaN
 * stays NaN through the arithmetic. */
static inline __m512 exp16(__m512 x) {
    /* constants first: max/min return the second operand when one is NaN, so NaN passes */
    x = _mm512_min_ps(_mm512_set1_ps(89.0f), _mm512_max_ps(_mm512_set1_ps(-104.0f), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187045e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

/* sigmoid(x) = 1 / (1 + exp(-x)); exp(-x) = inf for x < -89 gives 0 */
static inline __m512 sigmoid16(__m512 x) {
    const __m512 one = _mm512_set1_ps(1.0f);
    return _mm512_div_ps(one, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

static inline __mmask16 tail_mask(int64_t i, int64_t n) {
    return i + 16 <= n ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
}

void nx_ops_silu_avx512(float *y, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(i, n);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, sigmoid16(v)));
    }
}

void nx_ops_swiglu_avx512(float *g, const float *u, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(i, n);
        const __m512 v = _mm512_maskz_loadu_ps(m, g + i);
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_mul_ps(v, sigmoid16(v)), _mm512_maskz_loadu_ps(m, u + i)));
    }
}

void nx_ops_mul_silu_avx512(float *y, const float *z, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(i, n);
        const __m512 v = _mm512_maskz_loadu_ps(m, z + i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_mul_ps(v, sigmoid16(v))));
    }
}

void nx_ops_mul_sigmoid_avx512(float *y, const float *z, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(i, n);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + i),
                                                      sigmoid16(_mm512_maskz_loadu_ps(m, z + i))));
    }
}

void nx_ops_exp_avx512(float *y, const float *x, float sub, int64_t n) {
    const __m512 s = _mm512_set1_ps(sub);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(i, n);
        _mm512_mask_storeu_ps(y + i, m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), s)));
    }
}
