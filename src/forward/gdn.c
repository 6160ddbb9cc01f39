/* gdn.c - Gated DeltaNet recurrent state (slots for rollback) and kernels (gdn.h). */
#include "forward/gdn.h"

#include <stdlib.h>
#include <string.h>

#include "forward/gdn_conv_avx512.h"
#include "forward/ops.h"
#include "forward/ops_avx512.h"

bool nx_rstate_init(nx_rstate *rs, int n_layer, size_t conv_n, int hv, int d, int n_seq, int n_snapshots,
                    bool avx512, nx_err *err) {
    memset(rs, 0, sizeof *rs);
    if (n_seq <= 0 || n_snapshots < 0 || n_snapshots > 64)
        return nx_fail(err, "recurrent state: n_seq %d must be > 0 and n_snapshots %d in 0..64", n_seq, n_snapshots);
    rs->n_layer = n_layer;
    rs->n_seq = n_seq;
    rs->n_slot = 1 + n_snapshots;
    rs->conv_n = conv_n;
    rs->hv = hv;
    rs->d = d;
    rs->ssm_n = (size_t)d * (size_t)d * (size_t)hv;
    rs->rep_n = (size_t)hv * (2 * (size_t)d + 1);
    rs->avx512 = avx512;
    /* replay rows: a batch records up to R + 1 (all of its last nrep + 1 rows) */
    const uint64_t rep_rows = n_snapshots > 0 ? (uint64_t)n_snapshots + 1 : 0;
    uint64_t planes = (uint64_t)n_layer * (uint64_t)rs->n_slot * (uint64_t)n_seq, nc, ns, nr;
    if (!nx_mul_ok(planes, conv_n * sizeof(float), &nc) ||
        !nx_mul_ok((uint64_t)n_layer * (uint64_t)n_seq, rs->ssm_n * sizeof(float), &ns) ||
        !nx_mul_ok(2u * (uint64_t)n_layer * (uint64_t)n_seq * rep_rows, rs->rep_n * sizeof(float), &nr) ||
        nc > SIZE_MAX / 4 || ns > SIZE_MAX / 4 || nr > SIZE_MAX / 4)
        return nx_fail(err, "recurrent state: size overflow (%d sequences, %d slots)", n_seq, rs->n_slot);
    /* calloc: zero state; slots never used stay untouched zero pages */
    rs->conv = nx_calloc(1, nc ? nc : 64, "recurrent conv state", err);
    /* 64 bytes more, and ssm rounded up to a 64-byte boundary: every head's plane starts a cache
     * line (ssm_n * 4 bytes per plane is a multiple of 64 for d % 16 == 0) */
    rs->ssm_mem = rs->conv ? nx_calloc(1, (ns ? ns : 64) + 64, "recurrent delta state", err) : NULL;
    rs->ssm = rs->ssm_mem ? (float *)(((uintptr_t)rs->ssm_mem + 63) & ~(uintptr_t)63) : NULL;
    rs->rep = rs->ssm ? nx_calloc(1, nr ? nr : 64, "recurrent replay rows", err) : NULL;
    rs->cur = rs->rep ? nx_calloc((size_t)n_seq, sizeof *rs->cur, "recurrent slots", err) : NULL;
    rs->last_T = rs->cur ? nx_calloc((size_t)n_seq, sizeof *rs->last_T, "recurrent slots", err) : NULL;
    rs->ssm_seq = rs->last_T ? nx_calloc((size_t)n_seq, sizeof *rs->ssm_seq, "recurrent slots", err) : NULL;
    if (!rs->ssm_seq) {
        nx_rstate_free(rs);
        return false;
    }
    return true;
}

void nx_rstate_free(nx_rstate *rs) {
    free(rs->conv);
    free(rs->ssm_mem);
    free(rs->rep);
    free(rs->cur);
    free(rs->last_T);
    free(rs->ssm_seq);
    memset(rs, 0, sizeof *rs);
}

size_t nx_rstate_bytes(const nx_rstate *rs) {
    const size_t rep_rows = rs->n_slot > 1 ? (size_t)rs->n_slot : 0; /* R + 1 per buffer */
    const size_t per_seq_layer = (size_t)rs->n_slot * rs->conv_n + rs->ssm_n + 2 * rep_rows * rs->rep_n;
    return (size_t)rs->n_layer * (size_t)rs->n_seq * per_seq_layer * sizeof(float);
}

/* The sequence's delta state is its plane, nothing to replay. */
static void ssm_reset(nx_rstate *rs, int seq) { rs->ssm_seq[seq].nrec = 0; }

void nx_rstate_clear(nx_rstate *rs, int seq) {
    for (int l = 0; l < rs->n_layer; l++) {
        memset(nx_rstate_conv(rs, l, 0, seq), 0, rs->conv_n * sizeof(float));
        memset(nx_rstate_ssm(rs, l, seq), 0, rs->ssm_n * sizeof(float));
    }
    ssm_reset(rs, seq);
    rs->cur[seq] = 0;
    rs->last_T[seq] = 0;
}

int nx_rstate_max_rollback(const nx_rstate *rs, int seq) {
    /* slots cur+1 .. min(last_T, n_slot)-1 hold states after earlier tokens of the last batch */
    int lim = NX_MIN(rs->last_T[seq], rs->n_slot) - 1 - rs->cur[seq];
    return lim > 0 ? lim : 0;
}

bool nx_rstate_rollback(nx_rstate *rs, int seq, int r, nx_err *err) {
    if (r < 0) return nx_fail(err, "rollback of %d tokens is negative", r);
    int lim = nx_rstate_max_rollback(rs, seq);
    if (r > lim)
        return nx_fail(err, "sequence %d: cannot roll the recurrent state back %d tokens: snapshots cover %d "
                       "(%d snapshot slots, last batch had %d rows, already rolled back %d)", seq, r, lim,
                       rs->n_slot - 1, rs->last_T[seq], rs->cur[seq]);
    rs->cur[seq] += r;
    return true;
}

void nx_rstate_copy(nx_rstate *rs, int src, int dst) {
    if (src == dst) return;
    int cs = rs->cur[src];
    for (int l = 0; l < rs->n_layer; l++) {
        memcpy(nx_rstate_conv(rs, l, 0, dst), nx_rstate_conv(rs, l, cs, src), rs->conv_n * sizeof(float));
        nx_rstate_ssm_current(rs, l, src, nx_rstate_ssm(rs, l, dst));
    }
    ssm_reset(rs, dst);
    rs->cur[dst] = 0;
    rs->last_T[dst] = 0;
}

/* What a batch of T rows of sequence seq does with its delta state (see gdn.h). */
typedef struct ssm_plan {
    int m;         /* pending replay rows of the previous batch, applied first */
    int nrec;      /* replay rows this batch records (its last nrec rows; 0: none, the state after
                    * its last row is stored instead) */
} ssm_plan;

static ssm_plan plan_for(const nx_rstate *rs, int seq, int T) {
    const int nrep = NX_MIN(rs->n_slot - 1, T - 1); /* the rollbacks this batch allows */
    /* cur <= nrec - 1 (nx_rstate_max_rollback), so m >= 1 whenever rows were recorded */
    return (ssm_plan){.m = rs->ssm_seq[seq].nrec - rs->cur[seq], .nrec = nrep > 0 ? nrep + 1 : 0};
}

void nx_rstate_commit(nx_rstate *rs, int seq, int n_rows) {
    if (n_rows == 0) {
        ssm_reset(rs, seq); /* the caller put the state in the plane (checkpoint restore) */
    } else {
        const ssm_plan p = plan_for(rs, seq, n_rows);
        nx_ssm_seq *q = &rs->ssm_seq[seq];
        q->nrec = p.nrec;
        if (p.nrec > 0) q->rep_buf ^= 1;
    }
    rs->cur[seq] = 0;
    rs->last_T[seq] = n_rows;
}

/* Replay row e of buffer buf: per value head h, k[d], delta[d], decay. */
static inline float *rep_row(const nx_rstate *rs, int buf, int layer, int seq, int e) {
    const size_t R = (size_t)rs->n_slot; /* R + 1 rows per buffer */
    return rs->rep + ((((size_t)buf * (size_t)rs->n_layer + (size_t)layer) * (size_t)rs->n_seq + (size_t)seq) * R +
                      (size_t)e) * rs->rep_n;
}

/* ---- the delta-rule chain ---------------------------------------------------------------------
 * Scalar version of nx_gdn_chain_avx512 (same contract, ops_avx512.h); its float operations
 * per element are those of the per-token recurrence (decay, read, delta, write, output), so
 * any d works. */
static void chain_scalar(const float *src, const nx_gdn_step *st, int n, int d) {
    float s[512]; /* d <= 512 (nx_hparams_finish) */
    for (int j = 0; j < d; j++) {
        memcpy(s, src + (size_t)j * d, (size_t)d * sizeof(float));
        for (int t = 0; t < n; t++) {
            const nx_gdn_step *x = &st[t];
            float delta;
            if (x->q) {
                const float u = x->decay * nx_dot_f32(s, x->k, d);
                delta = x->beta * (x->v[j] - u);
                if (x->delta_out) x->delta_out[j] = delta;
            } else {
                delta = x->delta[j];
            }
            for (int i = 0; i < d; i++) s[i] = x->decay * s[i] + x->k[i] * delta;
            if (x->q) x->o[j] = nx_dot_f32(s, x->q, d);
            if (x->dst) memcpy(x->dst + (size_t)j * d, s, (size_t)d * sizeof(float));
        }
    }
}

static void run_chain(const float *src, const nx_gdn_step *st, int n, int d, bool avx512) {
    if (avx512 && d % 16 == 0) nx_gdn_chain_avx512(src, st, n, d);
    else chain_scalar(src, st, n, d);
}

void nx_rstate_ssm_current(const nx_rstate *rs, int layer, int seq, float *out) {
    const ssm_plan p = plan_for(rs, seq, 1);
    const float *in = nx_rstate_ssm(rs, layer, seq);
    if (p.m == 0) {
        if (out != in) memcpy(out, in, rs->ssm_n * sizeof(float));
        return;
    }
    const int d = rs->d, buf = rs->ssm_seq[seq].rep_buf;
    const size_t plane = (size_t)d * (size_t)d;
    nx_gdn_step st[NX_GDN_MAX_STEPS];
    for (int h = 0; h < rs->hv; h++) {
        const float *src = in + (size_t)h * plane;
        for (int e0 = 0; e0 < p.m; e0 += NX_GDN_MAX_STEPS) {
            const int n = NX_MIN(p.m - e0, NX_GDN_MAX_STEPS);
            for (int i = 0; i < n; i++) {
                const float *r = rep_row(rs, buf, layer, seq, e0 + i) + (size_t)h * (2 * (size_t)d + 1);
                st[i] = (nx_gdn_step){.k = r, .delta = r + d, .decay = r[2 * d], .dst = i == n - 1 ? out + (size_t)h * plane : NULL};
            }
            run_chain(src, st, n, d, rs->avx512);
            src = out + (size_t)h * plane;
        }
    }
}

/* ---- kernels -------------------------------------------------------------------------------- */

/* Slot receiving the state after row j of a sequence with T rows in this batch: the state after
 * row T-1-k goes to slot k when k < n_slot; earlier rows (no snapshot kept) work in slot 0.
 * Row j reads the slot row j-1 wrote (row 0 reads slot cur).  Consecutive rows therefore use
 * distinct slots (or slot 0 in place), so snapshots cost no copy: each token's update writes
 * straight into its snapshot slot. */
static inline int out_slot(int T, int j, int n_slot) {
    const int k = T - 1 - j;
    return k < n_slot ? k : 0;
}

static inline int in_slot(const nx_rstate *rs, int s, int T, int j) {
    return j == 0 ? rs->cur[s] : out_slot(T, j - 1, rs->n_slot);
}

void nx_gdn_conv(const nx_rstate *rs, int layer, const nx_gdn_rows *rows, int Kc, int C,
                 const float *w, const float *x, float *y, int c0, int c1, bool avx512) {
    const int W = Kc - 1; /* window length */
    /* AVX-512, kernel 4 (every Qwen3.5 model): whole 16-channel blocks by nx_gdn_conv4_avx512
     * (same bits as the loop below), the rest of [c0, c1) by the loop */
    const int cv = avx512 && Kc == 4 ? c0 + (c1 - c0) / 16 * 16 : c0;
    for (int t0 = 0; cv > c0 && t0 < rows->T; t0 += 64) {
        const float *srcs[64];
        float *dsts[64];
        const int n = NX_MIN(64, rows->T - t0);
        for (int i = 0; i < n; i++) {
            const int s = rows->seq[t0 + i], j = rows->j[t0 + i], T = rows->seq_T[s];
            srcs[i] = nx_rstate_conv(rs, layer, in_slot(rs, s, T, j), s);
            dsts[i] = nx_rstate_conv(rs, layer, out_slot(T, j, rs->n_slot), s);
        }
        nx_gdn_conv4_avx512(w, srcs, dsts, x + (size_t)t0 * (size_t)C, y + (size_t)t0 * (size_t)C, (size_t)C, n, c0, cv);
    }
    for (int t = 0; t < rows->T; t++) {
        const int s = rows->seq[t], j = rows->j[t];
        const int T = rows->seq_T[s];
        const float *src = nx_rstate_conv(rs, layer, in_slot(rs, s, T, j), s);
        float *dst = nx_rstate_conv(rs, layer, out_slot(T, j, rs->n_slot), s);
        const float *xt = x + (size_t)t * (size_t)C;
        float *yt = y + (size_t)t * (size_t)C;
        for (int c = cv; c < c1; c++) {
            const float *wc = w + (size_t)c * (size_t)Kc;
            const float *sw = src + (size_t)c * (size_t)W;
            float *dw = dst + (size_t)c * (size_t)W;
            const float xv = xt[c];
            float acc = 0.0f;
            for (int i = 0; i < W; i++) acc += sw[i] * wc[i];
            acc += xv * wc[W];
            /* shift the window; safe in place (dw == sw) because i+1 is read before i+1 is written */
            for (int i = 0; i + 1 < W; i++) dw[i] = sw[i + 1];
            if (W > 0) dw[W - 1] = xv;
            yt[c] = avx512 ? acc : nx_silu(acc);
        }
        if (avx512 && c1 > c0) nx_ops_silu_avx512(yt + c0, yt + c0, c1 - c0);
    }
}

/* Gated RMSNorm over one head's d values (shared weight norm_w), times silu(z) of that head. */
static void gated_norm(float *ot, const float *zt, const float *norm_w, float eps, int d, bool avx512) {
    nx_rmsnorm(ot, norm_w, ot, d, eps);
    if (avx512) nx_ops_mul_silu_avx512(ot, zt, d);
    else for (int i = 0; i < d; i++) ot[i] *= nx_silu(zt[i]);
}

/* Per head and sequence one chain of steps (gdn.h): the m replay rows a rollback left pending,
 * then the batch's T rows.  Step a is the last one whose state is stored (in place, into the
 * plane the chain reads): the anchor (the state before the last nrec rows) when the batch
 * records replay rows (a = -1: the input itself, nothing stored), else the last step.  Steps up
 * to a run in groups of at most NX_GDN_MAX_STEPS, each one pass over the head's state that
 * stores its last state in place (the next group reads it there); the nrec <= R + 1 recorded
 * steps after a run as one group that stores nothing: they write their (k, delta, decay) into
 * the other replay buffer. */
_Static_assert(NX_GDN_MAX_STEPS >= 64 + 1, "the recorded steps (up to 64 snapshots + 1) must fit one chain");

void nx_gdn_recurrence(const nx_gdn_recur *args, int h0, int h1) {
    const nx_rstate *rs = args->rs;
    const nx_gdn_rows *rows = args->rows;
    const int layer = args->layer, Hk = args->Hk, Hv = args->Hv, d = args->d, C = args->C;
    const float *qkv = args->qkv, *beta = args->beta, *g = args->g, *z = args->z, *norm_w = args->norm_w;
    const float eps = args->eps;
    float *out = args->out;
    const bool avx512 = args->avx512;
    const int key_dim = Hk * d, VD = Hv * d;
    const size_t plane = (size_t)d * (size_t)d, hstride = 2 * (size_t)d + 1;
    nx_gdn_step st[NX_GDN_MAX_STEPS];
    int tp[NX_GDN_MAX_STEPS];
    for (int s = 0; s < rs->n_seq; s++) {
        const int T = rows->seq_T[s];
        if (T == 0) continue;
        const ssm_plan p = plan_for(rs, s, T);
        const int N = p.m + T;                       /* steps of the chain */
        const int a = p.nrec > 0 ? N - 1 - p.nrec : N - 1; /* last stored step (-1: none) */
        const int old_buf = rs->ssm_seq[s].rep_buf, new_buf = old_buf ^ 1;
        for (int h = h0; h < h1; h++) {
            const int kh = h % Hk; /* value head h reads key head h mod Hk: the converter tiles value heads */
            float *state = nx_rstate_ssm(rs, layer, s) + (size_t)h * plane;
            int t = 0; /* batch row scanned so far; rows of s come in increasing j */
            for (int x0 = 0; x0 < N;) {
                const int n = NX_MIN((x0 <= a ? a + 1 : N) - x0, NX_GDN_MAX_STEPS);
                for (int i = 0; i < n; i++) {
                    const int x = x0 + i;
                    nx_gdn_step *q = &st[i];
                    if (x < p.m) {
                        const float *r = rep_row(rs, old_buf, layer, s, x) + (size_t)h * hstride;
                        *q = (nx_gdn_step){.k = r, .delta = r + d, .decay = r[2 * d]};
                        tp[i] = -1;
                    } else {
                        while (rows->seq[t] != s) t++;
                        const float *row = qkv + (size_t)t * (size_t)C;
                        *q = (nx_gdn_step){.k = row + key_dim + kh * d, .q = row + kh * d, .v = row + 2 * key_dim + h * d,
                                           .decay = expf(g[(size_t)t * Hv + h]), .beta = beta[(size_t)t * Hv + h],
                                           .o = out + (size_t)t * VD + (size_t)h * d};
                        if (x > a) { /* a recorded row (x >= p.m: the recorded rows are the batch's own) */
                            float *r = rep_row(rs, new_buf, layer, s, x - a - 1) + (size_t)h * hstride;
                            memcpy(r, q->k, (size_t)d * sizeof(float));
                            r[2 * d] = q->decay;
                            q->delta_out = r + d;
                        }
                        tp[i] = t++;
                    }
                    q->dst = i == n - 1 && x <= a ? state : NULL;
                }
                run_chain(state, st, n, d, avx512);
                for (int i = 0; i < n; i++)
                    if (tp[i] >= 0) gated_norm(st[i].o, z + (size_t)tp[i] * VD + (size_t)h * d, norm_w, eps, d, avx512);
                x0 += n;
            }
        }
    }
}
