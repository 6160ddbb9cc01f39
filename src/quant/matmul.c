/* matmul.c - Y[T][out] = X[T][in] · Wᵀ for W in any nx_type with a dot kernel (see matmul.h).
 *
 * Steps:
 *  1. Convert the T activation rows to what the kernel reads (nx_dot_plan_for: the weight's
 *     vec-dot type, or a kernel-specific "prepared" layout such as the AVX-512 q8_0 kernel's;
 *     F32 weights use X as is), into the caller's scratch, rows split across the pool when T
 *     is large.
 *  2. Split the `out` weight rows across the pool in chunks.  Inside a chunk, output rows are
 *     taken OUT_BLOCK at a time and, for each tile of up to NX_MATMUL_ROW_TILE activation
 *     rows, each weight row is dotted against the whole tile by the multi-row kernel: a weight
 *     block is decoded once per tile, and the OUT_BLOCK weight rows (a few tens of KB) stay
 *     in L2 while the tiles of a large T go by.
 *     Plans with a multi-weight-row kernel take the chunk's weight rows in one call when T = 1
 *     (dot_w), and with a tile kernel the OUT_BLOCK weight rows against a tile in one call
 *     (dot_tile); both are bit-identical per result to the multi-row kernel.
 * f32 weights at AVX-512 take neither: nx_matmul_f32_avx512 (matmul_f32.h) handles every T, 16
 * weight rows at a time, bit-identical to the f32 vec-dot kernel.
 * From NX_GEMM_MIN_T rows on, types with a GEMM kernel (q8_0, q4_K, q5_K, q6_K with AVX-512)
 * take the register-blocked path of gemm.h instead of step 2; it is bit-identical to the
 * vec-dot kernels, so the batch size never changes a result.
 * The result does not depend on the thread count: every output element is one kernel call
 * over the same inputs.
 */
#include "quant/matmul.h"

#include "quant/gemm.h"
#include "quant/matmul_f32.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Weight rows processed per activation tile sweep (keeps them in L2 across tiles). */
#define OUT_BLOCK 16
/* Grain of the output-row split (rows per chunk at least). */
#define OUT_GRAIN 16

bool nx_weight_init(nx_weight *w, const void *data, uint32_t type, int64_t in, int64_t out, nx_err *err) {
    const nx_type_traits *t = nx_type_get(type);
    if (!t) return nx_fail(err, "matmul weight: unknown tensor type id %u", type);
    if (!nx_vec_dot_for(type, NX_ISA_SCALAR))
        return nx_fail(err, "matmul weight: type %s has no dot kernel (not supported for matmul)", t->name);
    if (in <= 0 || out <= 0)
        return nx_fail(err, "matmul weight: bad shape {%lld, %lld} (both must be positive)", (long long)in,
                       (long long)out);
    size_t row_bytes;
    if (!nx_row_size(type, in, &row_bytes, err)) return nx_fail_prefix(err, "matmul weight");
    uint64_t total;
    if (!nx_mul_ok(row_bytes, (uint64_t)out, &total) || total > SIZE_MAX)
        return nx_fail(err, "matmul weight: %lld rows of %zu bytes overflow", (long long)out, row_bytes);
    if (!data) return nx_fail(err, "matmul weight: NULL data");
    w->data = data;
    w->type = type;
    w->in = in;
    w->out = out;
    w->row_bytes = row_bytes;
    return true;
}

void nx_matmul_scratch_free(nx_matmul_scratch *s) {
    if (!s) return;
    nx_free_aligned(s->buf);
    s->buf = NULL;
    s->cap = 0;
}

static bool scratch_reserve(nx_matmul_scratch *s, size_t bytes, nx_err *err) {
    if (s->cap >= bytes) return true;
    size_t cap = bytes + bytes / 2; /* grow geometrically: T varies between calls */
    void *p = nx_alloc_aligned(cap, "matmul activation scratch", err);
    if (!p) return false;
    nx_free_aligned(s->buf);
    s->buf = p;
    s->cap = cap;
    return true;
}

struct convert_ctx {
    const float *x;
    int64_t in;
    char *xq;
    size_t xrow;
    nx_from_float_fn from_float;
};

static void convert_rows(void *c, int64_t begin, int64_t end) {
    const struct convert_ctx *cc = c;
    for (int64_t t = begin; t < end; t++) cc->from_float(cc->x + t * cc->in, cc->xq + (size_t)t * cc->xrow, cc->in);
}

struct rows_ctx {
    const nx_weight *w;
    const char *xq;
    size_t xrow;
    int64_t T;
    float *y;
    nx_vec_dot_fn dot;
    nx_vec_dot_w_fn dot_w;
    nx_vec_dot_tile_fn dot_tile;
};

static void matmul_rows(void *c, int64_t begin, int64_t end) {
    const struct rows_ctx *rc = c;
    const nx_weight *w = rc->w;
    if (rc->T == 1 && rc->dot_w) { /* decode: the chunk's weight rows in as few calls as an int counts */
        for (int64_t o = begin; o < end; o += INT_MAX)
            rc->dot_w(w->in, rc->y + o, (const char *)w->data + (size_t)o * w->row_bytes, w->row_bytes, rc->xq,
                      (int)NX_MIN((int64_t)INT_MAX, end - o));
        return;
    }
    float tmp[NX_MATMUL_ROW_TILE];
    for (int64_t o0 = begin; o0 < end; o0 += OUT_BLOCK) {
        const int64_t o1 = NX_MIN(end, o0 + OUT_BLOCK);
        for (int64_t t0 = 0; t0 < rc->T; t0 += NX_MATMUL_ROW_TILE) {
            const int nr = (int)NX_MIN((int64_t)NX_MATMUL_ROW_TILE, rc->T - t0);
            const char *xt = rc->xq + (size_t)t0 * rc->xrow;
            if (rc->dot_tile) { /* the block's weight rows against the tile in one call */
                rc->dot_tile(w->in, rc->y + t0 * w->out + o0, (size_t)w->out,
                             (const char *)w->data + (size_t)o0 * w->row_bytes, w->row_bytes, (int)(o1 - o0), xt,
                             rc->xrow, nr);
                continue;
            }
            for (int64_t o = o0; o < o1; o++) {
                rc->dot(w->in, tmp, (const char *)w->data + (size_t)o * w->row_bytes, xt, rc->xrow, nr);
                for (int r = 0; r < nr; r++) rc->y[(t0 + r) * w->out + o] = tmp[r];
            }
        }
    }
}

struct f32_ctx {
    const nx_weight *w;
    const float *x;
    int64_t T;
    float *y;
};

static void matmul_f32_groups(void *c, int64_t begin, int64_t end) {
    const struct f32_ctx *fc = c;
    const int64_t out = fc->w->out;
    nx_matmul_f32_avx512(fc->w->data, fc->w->in, begin * NX_F32_GROUP, NX_MIN(out, end * NX_F32_GROUP), fc->x,
                         fc->T, fc->y, out);
}

/* Multiply-adds a chunk of an f32 matmul must reach before the work is split: a pool hand-off
 * costs a few microseconds, so smaller products run on the calling thread (on the demo model:
 * the 128 x 128 projections stay inline, the FFN, qkv and head matrices are split).  A
 * throwaway micro-benchmark of the demo model's 161 matrices on the shared 2-core VM gave, at
 * 16 K, 0.48 ms on 2 threads against 0.69 ms on one (2 rows); 4 K and 64 K were no better, but
 * whenever another job held the second core every setting that splits at all was ~4x slower,
 * so this is a rough value, not a tuned one. */
#define F32_CHUNK_WORK 16384

bool nx_matmul(nx_pool *pool, nx_matmul_scratch *scratch, const nx_weight *w, const float *x, int64_t T, float *y,
               nx_err *err) {
    return nx_matmul_isa(pool, scratch, w, x, T, y, nx_cpu_isa(), err);
}

bool nx_matmul_isa(nx_pool *pool, nx_matmul_scratch *scratch, const nx_weight *w, const float *x, int64_t T, float *y,
                   nx_isa isa, nx_err *err) {
    if (isa > nx_cpu_isa()) isa = nx_cpu_isa(); /* never a level this CPU (or NX_ISA) rules out */
    if (T <= 0) return T == 0 ? true : nx_fail(err, "matmul: negative row count %lld", (long long)T);
    /* f32 weights on AVX-512: 16 output rows at a time (matmul_f32.h), bit-identical to the
     * vec-dot kernel; work split in whole groups of 16 rows */
    if (w->type == NX_TYPE_F32 && isa >= NX_ISA_AVX512) {
        struct f32_ctx fc = {w, x, T, y};
        const int64_t groups = (w->out + NX_F32_GROUP - 1) / NX_F32_GROUP;
        const int64_t group_work = NX_F32_GROUP * w->in * T;
        nx_parallel_for(pool, groups, NX_MAX((int64_t)1, F32_CHUNK_WORK / group_work), matmul_f32_groups, &fc);
        return true;
    }
    /* the kernel for this CPU and how it wants the activations: the weight's vec-dot type, or
     * a kernel-specific prepared layout (quant.h, nx_dot_plan_for) */
    nx_dot_plan plan;
    if (!nx_dot_plan_for(w->type, isa, w->in, &plan, err)) return nx_fail_prefix(err, "matmul");

    /* large batches: the register-blocked GEMM (gemm.h); it reads activations in the weight's
     * vec-dot type (never a prepared layout) */
    const nx_gemm_ops *gemm = T >= NX_GEMM_MIN_T ? nx_gemm_ops_for(w->type, isa) : NULL;
    const size_t gemm_bytes = gemm ? nx_gemm_scratch_bytes(gemm, w->in, T, nx_pool_size(pool)) : 0;
    if (gemm) {
        const nx_type act = nx_type_get(w->type)->vec_dot_type;
        if (!nx_row_size(act, w->in, &plan.act_row_bytes, err)) return nx_fail_prefix(err, "matmul activations");
        plan.act_from_float = nx_type_get(act)->from_float;
        plan.act_as_is = false;
    }

    const char *xq;
    const size_t xrow = plan.act_row_bytes;
    size_t xbytes = 0;
    if (plan.act_as_is) {
        xq = (const char *)x;
    } else {
        uint64_t bytes;
        if (!nx_mul_ok(xrow, (uint64_t)T, &bytes) || bytes > SIZE_MAX)
            return nx_fail(err, "matmul: %lld activation rows overflow the scratch size", (long long)T);
        xbytes = ((size_t)bytes + 63) & ~(size_t)63;
        if (xbytes + gemm_bytes < xbytes)
            return nx_fail(err, "matmul: %lld activation rows overflow the scratch size", (long long)T);
        if (!scratch_reserve(scratch, xbytes + gemm_bytes, err)) return false;
        struct convert_ctx cc = {x, w->in, scratch->buf, xrow, plan.act_from_float};
        /* converting a row costs about as much as streaming a few KB: split only for batches */
        nx_parallel_for(pool, T, 4, convert_rows, &cc);
        xq = scratch->buf;
    }

    if (gemm) {
        if (xbytes == 0 && !scratch_reserve(scratch, gemm_bytes, err)) return false;
        nx_gemm(pool, gemm, w, xq, xrow, T, y, (char *)scratch->buf + xbytes);
        return true;
    }
    struct rows_ctx rc = {w, xq, xrow, T, y, plan.dot, plan.dot_w, plan.dot_tile};
    nx_parallel_for(pool, w->out, OUT_GRAIN, matmul_rows, &rc);
    return true;
}
