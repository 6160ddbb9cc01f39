/* bench_dot.c - throughput of the matmul dot kernels, in GB/s of weights consumed.
 *
 * For each weight type and ISA level, a matrix-vector (1 activation row) and a 4-row product
 * with a weight matrix larger than the last-level cache (default 512 MiB, rows of 4096
 * elements): on one thread the dot kernel alone over every row (activations converted
 * beforehand, in the layout nx_matmul prepares for that kernel), on all threads the whole nx_matmul.  Also measures the plain
 * read bandwidth of the machine with a streaming sum over a buffer of the same size, on one
 * and on all threads, as the yardstick.  Prints the median of --runs timed runs (after one
 * warm-up run) as a markdown table.
 *
 * usage: bench_dot [--mb N | --kb N] [--runs N] [--types q8_0,q4_K,...] [--isa scalar,avx2,avx512]
 *                  [--threads N] [--rows 1,4] [--cols N] [--hugepages] [--no-prepared] [--no-tile]
 * --kb N: a weight matrix of N KiB instead (e.g. 256: stays in L2, so the kernel's compute cost
 * alone is measured); --rows: the activation row counts (1..8); --cols N: weight rows of N
 * elements (a multiple of 256, at most 16384; default 4096; decode's matrices have rows of
 * 1024, 2048 and 3584); --hugepages: the weight buffer 2 MiB-aligned with MADV_HUGEPAGE (TLB
 * A/B: without it the buffer is on whatever pages malloc gives); --no-prepared: the vec-dot
 * kernel on plain activation rows even where a prepared-activation kernel exists (A/B);
 * --no-tile: in the one-thread kernel column, batches (rows > 1) call the multi-row kernel once
 * per weight row even where a tile kernel (nx_dot_plan.dot_tile; 16 weight rows per call, as
 * nx_matmul calls it) exists (A/B; the all-thread nx_matmul column is unchanged).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <immintrin.h>
#include <sys/mman.h>

#include "bench_util.h"
#include "quant/matmul.h"
#include "quant/quant.h"
#include "base/threads.h"

#define MAX_IN 16384

/* CPU time of the calling thread: on a shared machine, single-thread GB/s per CPU-second is
 * what the kernel achieves while it actually holds a core (wall time also counts the time
 * other processes hold it). */
static double thread_cpu_s(void) { return bu_seconds(CLOCK_THREAD_CPUTIME_ID); }

/* ---- streaming read bandwidth ---- */

struct sum_ctx {
    const uint64_t *p;
    uint64_t partial[512];
};

/* The read loop must not be the bottleneck itself, so it uses the widest loads the CPU has
 * (bench files are compiled for the baseline ISA; these two functions get their own target). */
__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint64_t *p, int64_t n) {
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        a = _mm512_add_epi64(a, _mm512_loadu_si512(p + i));
        b = _mm512_add_epi64(b, _mm512_loadu_si512(p + i + 8));
        c = _mm512_add_epi64(c, _mm512_loadu_si512(p + i + 16));
        d = _mm512_add_epi64(d, _mm512_loadu_si512(p + i + 24));
    }
    /* lanes summed as unsigned (gcc's _mm512_reduce_add_epi64 adds them as signed long long: UBSan rejects
     * the wrap-around a checksum of arbitrary words reaches) */
    uint64_t lane[8], s = 0;
    _mm512_storeu_si512(lane, _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d)));
    for (int k = 0; k < 8; k++) s += lane[k];
    for (; i < n; i++) s += p[i];
    return s;
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, int64_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256((const __m256i *)(p + i)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256((const __m256i *)(p + i + 4)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256((const __m256i *)(p + i + 8)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256((const __m256i *)(p + i + 12)));
    }
    uint64_t t[4];
    _mm256_storeu_si256((__m256i *)t, _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    uint64_t s = t[0] + t[1] + t[2] + t[3];
    for (; i < n; i++) s += p[i];
    return s;
}

static uint64_t sum_plain(const uint64_t *p, int64_t n) {
    uint64_t a = 0, b = 0;
    int64_t i = 0;
    for (; i + 2 <= n; i += 2) a += p[i], b += p[i + 1];
    for (; i < n; i++) a += p[i];
    return a + b;
}

static void sum_range(void *c, int64_t begin, int64_t end) {
    struct sum_ctx *sc = c;
    uint64_t s;
    if (__builtin_cpu_supports("avx512f")) s = sum_avx512(sc->p + begin, end - begin);
    else if (__builtin_cpu_supports("avx2")) s = sum_avx2(sc->p + begin, end - begin);
    else s = sum_plain(sc->p + begin, end - begin);
    /* the value only defeats dead-code elimination; atomic because chunks may share a slot */
    __atomic_fetch_add(&sc->partial[(begin / 4096) % 512], s, __ATOMIC_RELAXED);
}

/* GB/s by wall time; *cpu_gbs (single thread only) by thread CPU time */
static double read_bandwidth(nx_pool *pool, const void *buf, size_t bytes, int runs, double *cpu_gbs) {
    struct sum_ctx sc = {.p = buf};
    double t[64], c[64];
    nx_parallel_for(pool, (int64_t)(bytes / 8), 1 << 16, sum_range, &sc); /* warm-up */
    for (int r = 0; r < runs; r++) {
        double t0 = nx_time_s(), c0 = thread_cpu_s();
        nx_parallel_for(pool, (int64_t)(bytes / 8), 1 << 16, sum_range, &sc);
        t[r] = nx_time_s() - t0;
        c[r] = thread_cpu_s() - c0;
    }
    uint64_t s = 0;
    for (int i = 0; i < 512; i++) s += sc.partial[i];
    if (s == 42) printf("(checksum %llu)\n", (unsigned long long)s);
    if (cpu_gbs) *cpu_gbs = (double)bytes / bu_median(c, runs) / 1e9;
    return (double)bytes / bu_median(t, runs) / 1e9;
}

/* ---- matmul throughput ---- */

static bool list_has(const char *list, const char *name) {
    if (!list) return true;
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n) {
        bool start = p == list || p[-1] == ',';
        bool end = p[n] == '\0' || p[n] == ',';
        if (start && end) return true;
    }
    return false;
}

int main(int argc, char **argv) {
    size_t mb = 512, kb = 0;
    int runs = 5, threads = 0, nrows_list = 0, rows_list[8];
    bool no_prep = false, huge = false, no_tile = false;
    int64_t cols = 4096; /* elements per weight row */
    const char *types_arg = NULL, *isa_arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mb") && i + 1 < argc) mb = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--kb") && i + 1 < argc) kb = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--no-prepared")) no_prep = true;
        else if (!strcmp(argv[i], "--hugepages")) huge = true;
        else if (!strcmp(argv[i], "--no-tile")) no_tile = true;
        else if (!strcmp(argv[i], "--cols") && i + 1 < argc) {
            cols = atol(argv[++i]);
            if (cols < 256 || cols > MAX_IN || cols % 256) {
                fprintf(stderr, "bench_dot: --cols takes a multiple of 256 in 256..%d\n", MAX_IN);
                return 2;
            }
        }
        else if (!strcmp(argv[i], "--rows") && i + 1 < argc) {
            for (char *t = strtok(argv[++i], ","); t && nrows_list < 8; t = strtok(NULL, ",")) {
                rows_list[nrows_list] = atoi(t);
                if (rows_list[nrows_list] < 1 || rows_list[nrows_list] > 8) {
                    fprintf(stderr, "bench_dot: --rows takes counts in 1..8\n");
                    return 2;
                }
                nrows_list++;
            }
        }
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--types") && i + 1 < argc) types_arg = argv[++i];
        else if (!strcmp(argv[i], "--isa") && i + 1 < argc) isa_arg = argv[++i];
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else {
            fprintf(stderr,
                    "usage: %s [--mb N | --kb N] [--runs N] [--types a,b] [--isa scalar,avx2,avx512] [--threads N] "
                    "[--rows 1,4] [--cols N] [--hugepages] [--no-prepared] [--no-tile]\n",
                    argv[0]);
            return 2;
        }
    }
    if (runs < 1 || runs > 64 || mb < 1) {
        fprintf(stderr, "bench_dot: --runs must be 1..64 and --mb >= 1\n");
        return 2;
    }
    nx_err err;
    nx_pool *pool = nx_pool_create(threads, &err);
    if (!pool) {
        fprintf(stderr, "bench_dot: %s\n", err.msg);
        return 1;
    }
    if (!nrows_list) rows_list[nrows_list++] = 1, rows_list[nrows_list++] = 4;
    const size_t bytes = kb ? kb << 10 : mb << 20;
    unsigned char *buf;
    if (huge) {
        const size_t hp = (size_t)2 << 20, hbytes = (bytes + hp - 1) / hp * hp;
        void *p = NULL;
        if (posix_memalign(&p, hp, hbytes) != 0) p = NULL;
        if (p && madvise(p, hbytes, MADV_HUGEPAGE) != 0) perror("bench_dot: madvise(MADV_HUGEPAGE)");
        if (p) memset(p, 0, hbytes);
        buf = p;
        if (!buf) nx_fail(&err, "out of memory for %zu bytes of weights", hbytes);
    } else {
        buf = nx_alloc_aligned(bytes, "weights", &err); /* zeroed = touched */
    }
    if (!buf) {
        fprintf(stderr, "bench_dot: %s\n", err.msg);
        return 1;
    }
    const int nth = nx_pool_size(pool);
    const nx_isa best = nx_cpu_isa();
    printf("bench_dot: %zu KiB weights%s, rows of %lld, median of %d runs, %d threads, best ISA %s%s\n\n", bytes >> 10,
           huge ? " (MADV_HUGEPAGE)" : "", (long long)cols, runs, nth, nx_isa_name(best),
           no_prep ? ", vec-dot kernels on plain activation rows" : "");

    memset(buf, 1, bytes);
    double bw1_cpu;
    const double bw1 = read_bandwidth(NULL, buf, bytes, runs, &bw1_cpu);
    const double bwn = read_bandwidth(pool, buf, bytes, runs, NULL);
    printf("streaming read at start: 1 thread %.2f GB/s per CPU-second (%.2f GB/s wall); %d threads %.2f GB/s "
           "wall\n\n",
           bw1_cpu, bw1, nth, bwn);
    printf("Each row re-measures the streaming read just before the kernel (the load on a shared machine\n"
           "drifts), and the %% columns compare with that.\n\n");

    printf("| type | isa | rows | kernel 1 thr GB/s (CPU time) | read 1 thr GB/s (CPU time) | %% | "
           "nx_matmul %d thr GB/s (wall) | read %d thr GB/s (wall) | %% |\n",
           nth, nth);
    printf("|------|-----|-----:|------:|------:|----:|------:|------:|----:|\n");

    const nx_type types[] = {NX_TYPE_Q8_0, NX_TYPE_Q4_0, NX_TYPE_Q4_K, NX_TYPE_Q5_K, NX_TYPE_Q6_K, NX_TYPE_Q5_0,
                             NX_TYPE_Q4_1, NX_TYPE_Q5_1, NX_TYPE_F16,  NX_TYPE_BF16, NX_TYPE_F32,
                             NX_TYPE_Q2_K, NX_TYPE_Q3_K, NX_TYPE_IQ4_XS, NX_TYPE_IQ4_NL};
    static float x[8 * MAX_IN];
    for (int i = 0; i < 8 * MAX_IN; i++) x[i] = (float)((i * 7919) % 1000) / 500.0f - 1.0f;
    for (size_t ti = 0; ti < NX_ARRAY_LEN(types); ti++) {
        const nx_type_traits *t = nx_type_get(types[ti]);
        if (!list_has(types_arg, t->name)) continue;
        size_t row_bytes;
        nx_row_size(types[ti], cols, &row_bytes, &err);
        const int64_t out = (int64_t)(bytes / row_bytes);
        /* realistic weights: quantise 64 random rows, replicate them over the buffer */
        float *rows = malloc(sizeof(float) * cols * 64);
        uint64_t s = 88172645463325252ull;
        for (int i = 0; i < cols * 64; i++) {
            s ^= s << 13, s ^= s >> 7, s ^= s << 17;
            rows[i] = (float)((int64_t)(s >> 40) - (1 << 23)) / (float)(1 << 23) * 0.05f;
        }
        for (int64_t o = 0; o < 64 && o < out; o++) t->from_float(rows + o * cols, buf + (size_t)o * row_bytes, cols);
        for (int64_t o = 64; o < out; o++) memcpy(buf + (size_t)o * row_bytes, buf + (size_t)(o % 64) * row_bytes, row_bytes);
        free(rows);
        nx_weight w;
        if (!nx_weight_init(&w, buf, types[ti], cols, out, &err)) {
            fprintf(stderr, "bench_dot: %s\n", err.msg);
            return 1;
        }
        float *yb = malloc(sizeof(float) * 8 * (size_t)out);
        nx_matmul_scratch scratch = {0};
        for (int isa = 0; isa <= (int)best; isa++) {
            if (!list_has(isa_arg, nx_isa_name((nx_isa)isa))) continue;
            for (int ri = 0; ri < nrows_list; ri++) {
                const int T = rows_list[ri];
                /* single thread: the dot kernel alone over every weight row (activations
                 * converted beforehand), as nx_matmul's inner loop does it */
                nx_dot_plan plan; /* the kernel and activation layout nx_matmul uses */
                if (!nx_dot_plan_for(types[ti], (nx_isa)isa, cols, &plan, &err)) {
                    fprintf(stderr, "bench_dot: %s\n", err.msg);
                    return 1;
                }
                if (no_prep && t->prepared[isa].dot && plan.dot == t->prepared[isa].dot) {
                    plan.dot = nx_vec_dot_for(types[ti], (nx_isa)isa);
                    plan.act_from_float = nx_type_get(t->vec_dot_type)->from_float;
                    nx_row_size(t->vec_dot_type, cols, &plan.act_row_bytes, &err);
                }
                const nx_vec_dot_fn dot = plan.dot;
                const size_t xrow = plan.act_row_bytes;
                char *xq = nx_alloc_aligned(xrow * 8, "activations", &err);
                for (int r = 0; r < T; r++) {
                    if (plan.act_as_is) memcpy(xq + r * xrow, x + r * cols, xrow);
                    else plan.act_from_float(x + r * cols, xq + r * xrow, cols);
                }
                double tm[64], tc[64], read1, readn;
                read_bandwidth(NULL, buf, bytes, runs, &read1);
                for (int r = -1; r < runs; r++) { /* r = -1: warm-up */
                    double c0 = thread_cpu_s();
                    if (T == 1 && plan.dot_w) /* as nx_matmul's decode does: many weight rows per call */
                        plan.dot_w(cols, yb, buf, row_bytes, xq, (int)out);
                    else if (plan.dot_tile && !no_tile) /* as nx_matmul's batches: 16 weight rows per call */
                        for (int64_t o = 0; o < out; o += 16)
                            plan.dot_tile(cols, yb + o, (size_t)out, buf + (size_t)o * row_bytes, row_bytes,
                                          (int)NX_MIN((int64_t)16, out - o), xq, xrow, T);
                    else
                        for (int64_t o = 0; o < out; o++) dot(cols, yb + 8 * o, buf + (size_t)o * row_bytes, xq, xrow, T);
                    if (r >= 0) tc[r] = thread_cpu_s() - c0;
                }
                nx_free_aligned(xq);
                const double wbytes = (double)row_bytes * (double)out;
                const double gbs_cpu = wbytes / bu_median(tc, runs) / 1e9;
                /* all threads: the whole nx_matmul (activation conversion included) */
                readn = read_bandwidth(pool, buf, bytes, runs, NULL);
                nx_matmul_isa(pool, &scratch, &w, x, T, yb, (nx_isa)isa, &err); /* warm-up */
                for (int r = 0; r < runs; r++) {
                    double t0 = nx_time_s();
                    nx_matmul_isa(pool, &scratch, &w, x, T, yb, (nx_isa)isa, &err);
                    tm[r] = nx_time_s() - t0;
                }
                const double gbs_n = wbytes / bu_median(tm, runs) / 1e9;
                printf("| %s | %s | %d | %.2f | %.2f | %.0f%% | %.2f | %.2f | %.0f%% |\n", t->name,
                       nx_isa_name((nx_isa)isa), T, gbs_cpu, read1, 100 * gbs_cpu / read1, gbs_n, readn,
                       100 * gbs_n / readn);
                fflush(stdout);
            }
        }
        nx_matmul_scratch_free(&scratch);
        free(yb);
    }
    if (huge) free(buf);
    else nx_free_aligned(buf);
    nx_pool_free(pool);
    return 0;
}
