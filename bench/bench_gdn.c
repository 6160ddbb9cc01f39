/* bench_gdn.c - CPU time of the Gated DeltaNet recurrence (delta-rule chain + gated RMSNorm,
 * nx_gdn_recurrence) per token, for k-row batches in the speculative loop's steady state.
 * usage: bench_gdn [hv=16] [hk=16] [layers=18] [kmax=4] [reps=30] [flush_mb=16] [isa=avx512|scalar] [only=0]
 * Defaults: the 0.8b shape (18 GDN layers, 16 key and 16 value heads of d = 128: 19.3 MiB of
 * delta state per sequence); the 35B-A3B shape has hv = 32.  Each round runs a k-row batch for
 * k = 1 .. kmax in turn through every layer, then rolls the last k - 1 rows back (as after a
 * verify that accepts nothing), so a batch starts with the replay row the rollback left.  Before
 * each layer flush_mb MiB of other memory is read (untimed: the layer's weights would be), so the
 * layer's state comes from memory as in a forward pass.  Only the recurrence calls are timed, in
 * the thread's CPU time; prints per k the median and minimum per batch and their ratio to k = 1.
 * only=K > 0 runs K-row batches alone (kmax = 1: plain decode, one step per layer and head; for a
 * profiler: `perf record bench_gdn 16 16 18 4 40 16 avx512 4`). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "base/common.h"
#include "quant/quant.h"
#include "forward/gdn.h"

static uint64_t rng_state = 88172645463325252u;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) / (float)(1u << 23) - 1.0f;
}

static void l2norm(float *x, int d, float scale) {
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)x[i] * x[i];
    const float f = scale / (float)sqrt(s + 1e-6);
    for (int i = 0; i < d; i++) x[i] *= f;
}

int main(int argc, char **argv) {
    const int hv = argc > 1 ? atoi(argv[1]) : 16, hk = argc > 2 ? atoi(argv[2]) : 16;
    const int nl = argc > 3 ? atoi(argv[3]) : 18, kmax = argc > 4 ? atoi(argv[4]) : 4;
    const int reps = argc > 5 ? atoi(argv[5]) : 30, flush_mb = argc > 6 ? atoi(argv[6]) : 16;
    const bool avx512 = argc > 7 ? strcmp(argv[7], "scalar") != 0 : nx_cpu_isa() >= NX_ISA_AVX512;
    const int only = argc > 8 ? atoi(argv[8]) : 0;
    enum { D = 128, KLIM = 16, RLIM = 500 };
    if (hv < 1 || hk < 1 || hv % hk || nl < 1 || kmax < 1 || kmax > KLIM || reps < 1 || reps > RLIM || flush_mb < 0 || only < 0 ||
        only > kmax) {
        fprintf(stderr, "usage: %s [hv=16] [hk=16 dividing hv] [layers=18] [kmax=4 <= %d] [reps=30 <= %d] [flush_mb=16] "
                "[isa=avx512|scalar] [only=0..kmax]\n", argv[0], KLIM, RLIM);
        return 2;
    }
    if (avx512 && nx_cpu_isa() < NX_ISA_AVX512) {
        fprintf(stderr, "bench_gdn: this CPU has no AVX-512\n");
        return 2;
    }
    nx_err err = {0};
    nx_rstate rs;
    if (!nx_rstate_init(&rs, nl, 3 * (size_t)(2 * hk * D + hv * D), hv, D, 1, kmax - 1, avx512, &err)) {
        fprintf(stderr, "bench_gdn: %s\n", err.msg);
        return 1;
    }
    const int C = 2 * hk * D + hv * D, VD = hv * D;
    float *qkv = malloc((size_t)KLIM * C * sizeof(float)), *beta = malloc((size_t)KLIM * hv * sizeof(float));
    float *g = malloc((size_t)KLIM * hv * sizeof(float)), *z = malloc((size_t)KLIM * VD * sizeof(float));
    float *out = malloc((size_t)KLIM * VD * sizeof(float)), norm_w[D];
    const size_t flush_n = (size_t)flush_mb << 18;
    float *flush = malloc((flush_n ? flush_n : 1) * sizeof(float));
    if (!qkv || !beta || !g || !z || !out || !flush) return 1;
    for (int i = 0; i < D; i++) norm_w[i] = 1.0f + 0.01f * frand();
    for (size_t i = 0; i < flush_n; i++) flush[i] = frand();
    int32_t seq[KLIM], jj[KLIM], seq_T[1];
    static double t[KLIM + 1][RLIM];
    volatile float sink = 0;
    for (int r = 0; r < reps; r++)
        for (int k = 1; k <= kmax; k++) {
            if (only && k != only) continue;
            for (int i = 0; i < k; i++) {
                seq[i] = 0;
                jj[i] = i;
                float *row = qkv + (size_t)i * C;
                for (int c = 0; c < C; c++) row[c] = frand();
                for (int h = 0; h < 2 * hk; h++) l2norm(row + (size_t)h * D, D, h < hk ? 1.0f / sqrtf((float)D) : 1.0f);
                for (int h = 0; h < hv; h++) {
                    beta[i * hv + h] = 0.5f + 0.4f * frand();
                    g[i * hv + h] = -0.05f - 0.04f * frand();
                }
                for (int c = 0; c < VD; c++) z[(size_t)i * VD + c] = frand();
            }
            seq_T[0] = k;
            const nx_gdn_rows rows = {k, seq, jj, seq_T};
            double sum = 0;
            for (int l = 0; l < nl; l++) {
                float acc = 0;
                for (size_t i = 0; i < flush_n; i += 16) acc += flush[i];
                sink += acc;
                const nx_gdn_recur a = {.rs = &rs, .layer = l, .rows = &rows, .Hk = hk, .Hv = hv, .d = D, .qkv = qkv,
                                        .C = C, .beta = beta, .g = g, .z = z, .norm_w = norm_w, .eps = 1e-6f,
                                        .out = out, .avx512 = avx512};
                const double t0 = bu_seconds(CLOCK_THREAD_CPUTIME_ID);
                nx_gdn_recurrence(&a, 0, hv);
                sum += bu_seconds(CLOCK_THREAD_CPUTIME_ID) - t0;
            }
            t[k][r] = sum;
            nx_rstate_commit(&rs, 0, k);
            if (k > 1 && !nx_rstate_rollback(&rs, 0, k - 1, &err)) {
                fprintf(stderr, "bench_gdn: %s\n", err.msg);
                return 1;
            }
        }
    printf("bench_gdn: hv %d hk %d d %d layers %d (%.1f MiB of delta state), %s, %d rounds, flush %d MiB per layer\n",
           hv, hk, D, nl, (double)rs.ssm_n * nl * 4 / 1048576.0, avx512 ? "avx512" : "scalar", reps, flush_mb);
    double med1 = 0, min1 = 0;
    for (int k = 1; k <= kmax; k++) {
        if (only && k != only) continue;
        const double med = bu_median(t[k], reps), mn = t[k][0];
        if (med1 == 0) {
            med1 = med;
            min1 = mn;
        }
        printf("k=%-2d  median %7.3f ms  min %7.3f ms   ratio to the first: median %.2fx  min %.2fx\n", k, med * 1e3,
               mn * 1e3, med / med1, mn / min1);
    }
    (void)sink;
    nx_rstate_free(&rs);
    free(qkv);
    free(beta);
    free(g);
    free(z);
    free(out);
    free(flush);
    return 0;
}
