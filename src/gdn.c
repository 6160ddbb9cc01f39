/* gdn.c - Gated DeltaNet recurrent state (slots for rollback) and kernels (reference §4). */
#include "gdn.h"

#include <stdlib.h>
#include <string.h>

#include "gdn_conv_avx512.h"
#include "ops.h"
#include "ops_avx512.h"

bool nx_rstate_init(nx_rstate *rs, int n_layer, size_t conv_n, size_t ssm_n, int n_seq, int n_snapshots, nx_err *err) {
    memset(rs, 0, sizeof *rs);
    if (n_seq <= 0 || n_snapshots < 0 || n_snapshots > 64)
        return nx_fail(err, "recurrent state: n_seq %d must be > 0 and n_snapshots %d in 0..64", n_seq, n_snapshots);
    rs->n_layer = n_layer;
    rs->n_seq = n_seq;
    rs->n_slot = 1 + n_snapshots;
    rs->conv_n = conv_n;
    rs->ssm_n = ssm_n;
    uint64_t planes = (uint64_t)n_layer * (uint64_t)rs->n_slot * (uint64_t)n_seq, nc, ns;
    if (!nx_mul_ok(planes, conv_n * sizeof(float), &nc) || !nx_mul_ok(planes, ssm_n * sizeof(float), &ns) ||
        nc > SIZE_MAX / 4 || ns > SIZE_MAX / 4)
        return nx_fail(err, "recurrent state: size overflow (%d sequences, %d slots)", n_seq, rs->n_slot);
    /* calloc: zero state; snapshot slots never used stay untouched zero pages */
    rs->conv = nx_calloc(1, nc ? nc : 64, "recurrent conv state", err);
    /* 64 bytes more, and ssm rounded up to a 64-byte boundary: the fused delta-rule kernel writes
     * snapshot slots with streaming stores, which need aligned lines (ssm_n * 4 bytes per plane
     * is a multiple of 64 for d % 16 == 0, so every head of every plane is aligned too) */
    rs->ssm_mem = rs->conv ? nx_calloc(1, (ns ? ns : 64) + 64, "recurrent delta state", err) : NULL;
    rs->ssm = rs->ssm_mem ? (float *)(((uintptr_t)rs->ssm_mem + 63) & ~(uintptr_t)63) : NULL;
    rs->cur = rs->ssm ? nx_calloc((size_t)n_seq, sizeof *rs->cur, "recurrent slots", err) : NULL;
    rs->last_T = rs->cur ? nx_calloc((size_t)n_seq, sizeof *rs->last_T, "recurrent slots", err) : NULL;
    if (!rs->last_T) {
        nx_rstate_free(rs);
        return false;
    }
    return true;
}

void nx_rstate_free(nx_rstate *rs) {
    free(rs->conv);
    free(rs->ssm_mem);
    free(rs->cur);
    free(rs->last_T);
    memset(rs, 0, sizeof *rs);
}

size_t nx_rstate_bytes(const nx_rstate *rs) {
    return (size_t)rs->n_layer * (size_t)rs->n_slot * (size_t)rs->n_seq * (rs->conv_n + rs->ssm_n) * sizeof(float);
}

void nx_rstate_clear(nx_rstate *rs, int seq) {
    for (int l = 0; l < rs->n_layer; l++) {
        memset(nx_rstate_conv(rs, l, 0, seq), 0, rs->conv_n * sizeof(float));
        memset(nx_rstate_ssm(rs, l, 0, seq), 0, rs->ssm_n * sizeof(float));
    }
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
        memcpy(nx_rstate_ssm(rs, l, 0, dst), nx_rstate_ssm(rs, l, cs, src), rs->ssm_n * sizeof(float));
    }
    rs->cur[dst] = 0;
    rs->last_T[dst] = 0;
}

void nx_rstate_commit(nx_rstate *rs, int seq, int n_rows) {
    rs->cur[seq] = 0;
    rs->last_T[seq] = n_rows;
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

/* Gated RMSNorm over one head's dv values (in place in out), times silu(z) (reference §4.7). */
static void gated_norm(const float *o, float *ot, const float *zt, const float *norm_w, float eps, int d,
                       bool avx512) {
    nx_rmsnorm(o, norm_w, ot, d, eps);
    if (avx512) nx_ops_mul_silu_avx512(ot, zt, d);
    else for (int i = 0; i < d; i++) ot[i] *= nx_silu(zt[i]);
}

/* AVX-512, d % 16 == 0: per head and sequence, the sequence's rows go through
 * nx_gdn_steps_avx512 in groups of up to NX_GDN_MAX_STEPS, so each state row is read once per
 * group and written only where a slot must hold it: the snapshot slots (out_slot k >= 1), the
 * sequence's last row (slot 0) and a group's last row (the next group reads it; rows older than
 * the snapshots update slot 0 in place, as in the row-by-row loop).  Every value equals the
 * row-by-row loop's (same float operations per state row and token). */
static void recurrence_fused(const nx_rstate *rs, int layer, const nx_gdn_rows *rows, int Hk, int Hv, int d,
                             const float *qkv, int C, const float *beta, const float *g, const float *z,
                             const float *norm_w, float eps, float *out, int h0, int h1) {
    const int key_dim = Hk * d, VD = Hv * d;
    const float *kp[NX_GDN_MAX_STEPS], *qp[NX_GDN_MAX_STEPS], *vp[NX_GDN_MAX_STEPS];
    float *dp[NX_GDN_MAX_STEPS], *op[NX_GDN_MAX_STEPS], dec[NX_GDN_MAX_STEPS], bet[NX_GDN_MAX_STEPS];
    int tp[NX_GDN_MAX_STEPS];
    for (int h = h0; h < h1; h++) {
        const int kh = h % Hk; /* tiled k-head / v-head mapping (reference §4.5) */
        for (int s = 0; s < rs->n_seq; s++) {
            const int T = rows->seq_T[s];
            if (T == 0) continue;
            int t = 0; /* batch row scanned so far; rows of s come in increasing j */
            for (int j0 = 0; j0 < T; j0 += NX_GDN_MAX_STEPS) {
                const int n = NX_MIN(T - j0, NX_GDN_MAX_STEPS);
                for (int i = 0; i < n; i++) {
                    while (rows->seq[t] != s) t++;
                    const int j = j0 + i, slot = out_slot(T, j, rs->n_slot);
                    const float *row = qkv + (size_t)t * (size_t)C;
                    kp[i] = row + key_dim + kh * d;
                    qp[i] = row + kh * d;
                    vp[i] = row + 2 * key_dim + h * d;
                    dec[i] = expf(g[(size_t)t * Hv + h]);
                    bet[i] = beta[(size_t)t * Hv + h];
                    op[i] = out + (size_t)t * VD + (size_t)h * d;
                    dp[i] = slot != 0 || j == T - 1 || i == n - 1
                                ? nx_rstate_ssm(rs, layer, slot, s) + (size_t)h * d * d : NULL;
                    tp[i] = t++;
                }
                const float *src = nx_rstate_ssm(rs, layer, in_slot(rs, s, T, j0), s) + (size_t)h * d * d;
                nx_gdn_steps_avx512(src, dp, n, kp, qp, vp, dec, bet, op, d);
                for (int i = 0; i < n; i++)
                    gated_norm(op[i], op[i], z + (size_t)tp[i] * VD + (size_t)h * d, norm_w, eps, d, true);
            }
        }
    }
}

void nx_gdn_recurrence(const nx_rstate *rs, int layer, const nx_gdn_rows *rows, int Hk, int Hv, int d,
                       const float *qkv, int C, const float *beta, const float *g, const float *z,
                       const float *norm_w, float eps, float *out, int h0, int h1, bool avx512) {
    if (avx512 && d % 16 == 0) {
        recurrence_fused(rs, layer, rows, Hk, Hv, d, qkv, C, beta, g, z, norm_w, eps, out, h0, h1);
        return;
    }
    const int key_dim = Hk * d, VD = Hv * d;
    float o[512]; /* d <= 512 is enforced by nx_hparams_finish */
    for (int h = h0; h < h1; h++) {
        const int kh = h % Hk; /* tiled k-head / v-head mapping (reference §4.5) */
        for (int t = 0; t < rows->T; t++) {
            const int s = rows->seq[t], j = rows->j[t];
            const int T = rows->seq_T[s];
            const float *src = nx_rstate_ssm(rs, layer, in_slot(rs, s, T, j), s) + (size_t)h * d * d;
            float *dst = nx_rstate_ssm(rs, layer, out_slot(T, j, rs->n_slot), s) + (size_t)h * d * d;
            const float *row = qkv + (size_t)t * (size_t)C;
            const float *q = row + kh * d, *k = row + key_dim + kh * d, *v = row + 2 * key_dim + h * d;
            const float decay = expf(g[(size_t)t * Hv + h]);
            const float b = beta[(size_t)t * Hv + h];
            for (int jv = 0; jv < d; jv++) {
                const float *sr = src + (size_t)jv * d; /* S[.][jv], contiguous over the key index */
                float *dr = dst + (size_t)jv * d;
                const float u = decay * nx_dot_f32(sr, k, d);
                const float delta = b * (v[jv] - u);
                for (int i = 0; i < d; i++) dr[i] = decay * sr[i] + k[i] * delta;
                o[jv] = nx_dot_f32(dr, q, d);
            }
            gated_norm(o, out + (size_t)t * VD + (size_t)h * d, z + (size_t)t * VD + (size_t)h * d, norm_w, eps, d,
                       avx512);
        }
    }
}
