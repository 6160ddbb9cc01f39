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

void nx_gdn_step_avx512(const float *src, float *dst, const float *k, const float *q, const float *v,
                        float decay, float beta, float *o, int d) {
    const __m512 vdecay = _mm512_set1_ps(decay);
    for (int j = 0; j < d; j++) {
        const float *s = src + (size_t)j * d;
        float *t = dst + (size_t)j * d;
        __m512 acc = _mm512_setzero_ps();
        for (int i = 0; i < d; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(s + i), _mm512_loadu_ps(k + i), acc);
        const float u = decay * _mm512_reduce_add_ps(acc);
        const __m512 vdelta = _mm512_set1_ps(beta * (v[j] - u));
        __m512 out = _mm512_setzero_ps();
        for (int i = 0; i < d; i += 16) {
            __m512 nv = _mm512_fmadd_ps(_mm512_loadu_ps(k + i), vdelta, _mm512_mul_ps(vdecay, _mm512_loadu_ps(s + i)));
            _mm512_storeu_ps(t + i, nv);
            out = _mm512_fmadd_ps(nv, _mm512_loadu_ps(q + i), out);
        }
        o[j] = _mm512_reduce_add_ps(out);
    }
}

/* A chain of delta-rule steps for one value head (ops_avx512.h), fused: each state row j (the
 * column S[.][j], d floats) is loaded once, taken through the n steps in a local buffer (L1) and
 * stored only into the destinations the steps name.  A token step's float operations per row
 * are exactly nx_gdn_step_avx512's, in the same order, and a replay step repeats the update
 * with the recorded delta, so every stored state and every o value is bit-identical to chained
 * one-token steps (test_ops_simd checks this).
 * Eight state rows go through each step together: one row's token step is a chain of dependent
 * operations (8 FMAs, a horizontal sum, the update, 8 FMAs, a horizontal sum, ~100 cycles at
 * d = 128) and the next step needs its result, so one row at a time leaves the core waiting on
 * latencies; eight independent chains overlap them, and k and q are loaded once for the eight.
 * A destination other than src, 64-byte aligned, is written with streaming stores: it is
 * written whole and read again only in a later pass (after the whole model's weights have gone
 * through the caches), so reading its old lines first (read-for-ownership) would only add
 * memory traffic; a store into src itself (in-place update) stays an ordinary store of a line
 * already in cache.  The sfence at the end makes the streaming stores globally visible before
 * the function returns. */
enum { GDN_JB = 8 }; /* state rows per pass; d % 16 == 0 keeps d % GDN_JB == 0 */

void nx_gdn_chain_avx512(const float *src, const nx_gdn_step *st, int n, int d) {
    _Alignas(64) float s[GDN_JB][512]; /* d <= 512 (nx_hparams_finish) */
    bool stream[NX_GDN_MAX_STEPS];
    bool any_stream = false;
    for (int t = 0; t < n; t++) {
        stream[t] = st[t].dst && st[t].dst != src && ((uintptr_t)st[t].dst & 63) == 0;
        any_stream |= stream[t];
    }
    for (int j = 0; j < d; j += GDN_JB) {
        for (int r = 0; r < GDN_JB; r++)
            for (int i = 0; i < d; i += 16)
                _mm512_store_ps(s[r] + i, _mm512_loadu_ps(src + (size_t)(j + r) * (size_t)d + i));
        for (int t = 0; t < n; t++) {
            const nx_gdn_step *x = &st[t];
            const float *kt = x->k;
            const __m512 vdecay = _mm512_set1_ps(x->decay);
            __m512 vdelta[GDN_JB], out[GDN_JB];
            if (x->q) {
                __m512 acc[GDN_JB];
                for (int r = 0; r < GDN_JB; r++) acc[r] = _mm512_setzero_ps();
                for (int i = 0; i < d; i += 16) {
                    const __m512 kv = _mm512_loadu_ps(kt + i);
                    for (int r = 0; r < GDN_JB; r++) acc[r] = _mm512_fmadd_ps(_mm512_load_ps(s[r] + i), kv, acc[r]);
                }
                for (int r = 0; r < GDN_JB; r++) {
                    const float u = x->decay * _mm512_reduce_add_ps(acc[r]);
                    const float delta = x->beta * (x->v[j + r] - u);
                    if (x->delta_out) x->delta_out[j + r] = delta;
                    vdelta[r] = _mm512_set1_ps(delta);
                    out[r] = _mm512_setzero_ps();
                }
            } else {
                for (int r = 0; r < GDN_JB; r++) {
                    vdelta[r] = _mm512_set1_ps(x->delta[j + r]);
                    out[r] = _mm512_setzero_ps();
                }
            }
            float *dt = x->dst ? x->dst + (size_t)j * (size_t)d : NULL;
            const float *qt = x->q;
            for (int i = 0; i < d; i += 16) {
                const __m512 kv = _mm512_loadu_ps(kt + i);
                const __m512 qv = qt ? _mm512_loadu_ps(qt + i) : _mm512_setzero_ps();
                for (int r = 0; r < GDN_JB; r++) {
                    const __m512 nv = _mm512_fmadd_ps(kv, vdelta[r], _mm512_mul_ps(vdecay, _mm512_load_ps(s[r] + i)));
                    _mm512_store_ps(s[r] + i, nv);
                    if (stream[t]) _mm512_stream_ps(dt + (size_t)r * (size_t)d + i, nv);
                    else if (dt) _mm512_storeu_ps(dt + (size_t)r * (size_t)d + i, nv);
                    if (qt) out[r] = _mm512_fmadd_ps(nv, qv, out[r]);
                }
            }
            if (qt)
                for (int r = 0; r < GDN_JB; r++) x->o[j + r] = _mm512_reduce_add_ps(out[r]);
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
