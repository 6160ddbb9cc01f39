/* ops_avx512.c - AVX-512 kernels for the trunk (see ops_avx512.h).  Compiled with AVX-512 flags;
 * never called unless the CPU has AVX-512. */
#include "ops_avx512.h"

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
