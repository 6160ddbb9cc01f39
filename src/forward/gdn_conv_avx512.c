/* gdn_conv_avx512.c - see gdn_conv_avx512.h. */
#include "forward/gdn_conv_avx512.h"

#include <immintrin.h>

/* Index vectors of the permutes (built per call: a few dozen integer stores). */
typedef struct conv_perm {
    __m512i d3a[3], d3b[3];       /* state [16][3] -> tap i: lane l = element 3l + i */
    __m512i d4a[4], d4b[4];       /* weights [16][4] -> tap i: lane l = element 4l + i */
    __mmask16 d4hi[4];            /* lanes of tap i whose element lies in the upper 32 */
    __m512i i3a[3], i3b[3];       /* (s1, s2, x) -> state [16][3]: element e = 16 v + m */
} conv_perm;

static void build_perm(conv_perm *p) {
    int a[16], b[16];
    for (int i = 0; i < 3; i++) { /* deinterleave 3: first from (v0, v1), then the rest from v2 */
        for (int l = 0; l < 16; l++) {
            const int e = 3 * l + i;
            a[l] = e < 32 ? e : 0;
            b[l] = e < 32 ? l : 16 + (e - 32);
        }
        p->d3a[i] = _mm512_loadu_si512(a);
        p->d3b[i] = _mm512_loadu_si512(b);
    }
    for (int i = 0; i < 4; i++) { /* deinterleave 4: from (v0, v1) or (v2, v3), then blend */
        unsigned hi = 0;
        for (int l = 0; l < 16; l++) {
            const int e = 4 * l + i;
            a[l] = e < 32 ? e : 0;
            b[l] = e < 32 ? 0 : e - 32;
            hi |= (unsigned)(e >= 32) << l;
        }
        p->d4a[i] = _mm512_loadu_si512(a);
        p->d4b[i] = _mm512_loadu_si512(b);
        p->d4hi[i] = (__mmask16)hi;
    }
    for (int v = 0; v < 3; v++) { /* interleave 3: element e of the state comes from vector e % 3, lane e / 3 */
        for (int m = 0; m < 16; m++) {
            const int e = 16 * v + m, src = e % 3, lane = e / 3;
            a[m] = src == 0 ? lane : src == 1 ? 16 + lane : 0;
            b[m] = src == 2 ? 16 + lane : m;
        }
        p->i3a[v] = _mm512_loadu_si512(a);
        p->i3b[v] = _mm512_loadu_si512(b);
    }
}

void nx_gdn_conv4_avx512(const float *w, const float *const *src, float *const *dst, const float *x, float *y,
                         size_t C, int n_rows, int c0, int c1) {
    conv_perm p;
    build_perm(&p);
    for (int c = c0; c < c1; c += 16) {
        const float *wc = w + (size_t)c * 4;
        const __m512 w0 = _mm512_loadu_ps(wc), w1 = _mm512_loadu_ps(wc + 16);
        const __m512 w2 = _mm512_loadu_ps(wc + 32), w3 = _mm512_loadu_ps(wc + 48);
        __m512 wt[4];
        for (int i = 0; i < 4; i++)
            wt[i] = _mm512_mask_blend_ps(p.d4hi[i], _mm512_permutex2var_ps(w0, p.d4a[i], w1),
                                         _mm512_permutex2var_ps(w2, p.d4b[i], w3));
        for (int t = 0; t < n_rows; t++) {
            const float *s = src[t] + (size_t)c * 3;
            const __m512 v0 = _mm512_loadu_ps(s), v1 = _mm512_loadu_ps(s + 16), v2 = _mm512_loadu_ps(s + 32);
            __m512 tap[3];
            for (int i = 0; i < 3; i++)
                tap[i] = _mm512_permutex2var_ps(_mm512_permutex2var_ps(v0, p.d3a[i], v1), p.d3b[i], v2);
            const __m512 xv = _mm512_loadu_ps(x + (size_t)t * C + (size_t)c);
            __m512 acc = _mm512_add_ps(_mm512_setzero_ps(), _mm512_mul_ps(tap[0], wt[0]));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(tap[1], wt[1]));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(tap[2], wt[2]));
            acc = _mm512_add_ps(acc, _mm512_mul_ps(xv, wt[3]));
            _mm512_storeu_ps(y + (size_t)t * C + (size_t)c, acc);
            float *d = dst[t] + (size_t)c * 3; /* the window shifted by one: (s1, s2, x) */
            for (int v = 0; v < 3; v++)
                _mm512_storeu_ps(d + 16 * v, _mm512_permutex2var_ps(_mm512_permutex2var_ps(tap[1], p.i3a[v], tap[2]),
                                                                    p.i3b[v], xv));
        }
    }
}
