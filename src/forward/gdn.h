/* gdn.h - Gated DeltaNet: the recurrent state with rollback slots, and the layer's kernels.
 *
 * State per GDN layer per sequence, all F32 (as llama.cpp's recurrent cache r and s):
 *   conv: [conv_dim][Kc-1]  the last Kc-1 pre-convolution qkv values per channel, oldest first;
 *   ssm:  [Hv][d][d]        delta-rule matrix per value head, element S[i][j] (i = key index,
 *                           j = value index) at j*d + i, as llama.cpp lays it out.
 *
 * Conv state, rollback slots: each sequence owns 1 + R slots (R = n_snapshots), planes
 * [layer][slot][seq][...].  A batch with T_s rows of a sequence reads its input from slot
 * cur[seq] and writes slot 0 (state after its last row) and slot k (1<=k<=R, k < T_s: the state
 * after row T_s-1-k, a snapshot); each row reads the slot the previous row wrote and writes its
 * own (rows older than the last 1 + R update slot 0 in place), see out_slot() in gdn.c.  Then
 * cur[seq] = 0, last_T[seq] = T_s.  Rolling back r tokens (r < last_T, r <= R, cumulative) only
 * sets cur[seq] += r: O(1).
 *
 * Delta state (ssm, 64 KB per head at d = 128, the bulk): one plane per sequence (no snapshot
 * planes) and replay rows.  A batch of T_s rows with nrep = min(R, T_s - 1) possible rollbacks
 *   - nrep = 0 (every 1-row decode, every batch without snapshots): stores the state after its
 *     last row, in place;
 *   - nrep > 0: stores the anchor, the state before its last nrep + 1 rows, in place (nothing
 *     when that is the state it started from), and for each of those nrep + 1 rows its k, decay
 *     and the delta vector it computed (delta_j = beta (v_j - u_j)), in one of two replay
 *     buffers; the state after its last row is not stored.
 * The current state is the plane plus the first nrec - cur pending replay rows (nrec = the rows
 * the last batch recorded, cur = rows rolled back since): s = decay * s + delta_j k again, the
 * same float operations, so the same bits as the state the forward pass computed.  The next batch
 * applies the pending rows in the same pass over the state as its own rows (nx_gdn_recurrence),
 * so a rollback costs O(1), and a batch reads the plane once and writes it at most once, in
 * place, whatever its number of rows and whether a rollback preceded it.
 * nx_rstate_ssm_current materialises the current state for copies and checkpoints.
 */
#ifndef NX_GDN_H
#define NX_GDN_H

#include "base/common.h"

/* Per sequence: where its delta state is (see "Delta state" above). */
typedef struct nx_ssm_seq {
    int nrec;                     /* replay rows recorded by the last batch (pending unless rolled back) */
    int rep_buf;                  /* replay buffer (0/1) holding them */
} nx_ssm_seq;

typedef struct nx_rstate {
    int n_layer, n_seq, n_slot;   /* n_slot = 1 + R (conv slots) */
    int hv, d;                    /* value heads, head size */
    bool avx512;                  /* replays use the AVX-512 chain (as the forward pass does) */
    size_t conv_n;                /* (Kc-1) * conv_dim floats per (layer, slot, seq) */
    size_t ssm_n;                 /* d * d * Hv floats per (layer, seq) */
    size_t rep_n;                 /* Hv * (2d + 1) floats per replay row (k, delta, decay per head) */
    float *conv;
    float *ssm;                   /* 64-byte aligned inside ssm_mem */
    void *ssm_mem;
    float *rep;                   /* [2][layer][seq][R + 1][rep_n] (none without snapshots) */
    int32_t *cur;                 /* [n_seq] rows rolled back since the last batch (= its conv slot) */
    int32_t *last_T;              /* [n_seq] rows of the last batch of that sequence (0 = none) */
    nx_ssm_seq *ssm_seq;          /* [n_seq] */
} nx_rstate;

bool   nx_rstate_init(nx_rstate *rs, int n_layer, size_t conv_n, int hv, int d, int n_seq, int n_snapshots,
                      bool avx512, nx_err *err);
void   nx_rstate_free(nx_rstate *rs);
size_t nx_rstate_bytes(const nx_rstate *rs);

static inline float *nx_rstate_conv(const nx_rstate *rs, int layer, int slot, int seq) {
    return rs->conv + (((size_t)layer * (size_t)rs->n_slot + (size_t)slot) * (size_t)rs->n_seq + (size_t)seq) * rs->conv_n;
}
/* Raw ssm plane; the current state is nx_rstate_ssm_current's. */
static inline float *nx_rstate_ssm(const nx_rstate *rs, int layer, int seq) {
    return rs->ssm + ((size_t)layer * (size_t)rs->n_seq + (size_t)seq) * rs->ssm_n;
}
/* The sequence's current delta state of one layer (ssm_n floats) into out: a copy of its plane,
 * or that plane with the pending replay rows applied (bit-identical to having stopped there).
 * out must not be that plane unless nothing is pending. */
void nx_rstate_ssm_current(const nx_rstate *rs, int layer, int seq, float *out);

void nx_rstate_clear(nx_rstate *rs, int seq);                 /* zero state, cur = 0, no snapshots */
int  nx_rstate_max_rollback(const nx_rstate *rs, int seq);
bool nx_rstate_rollback(nx_rstate *rs, int seq, int r, nx_err *err);
void nx_rstate_copy(nx_rstate *rs, int src, int dst);         /* current state of src -> conv slot 0 and plane of dst */
/* After a batch of n_rows rows of seq (the conv state after its last row is in slot 0; the
 * delta state as described above).  n_rows = 0: the caller put the state in conv slot 0 and the
 * plane (checkpoint restore), nothing pending. */
void nx_rstate_commit(nx_rstate *rs, int seq, int n_rows);

/* ---- kernels (called by forward.c) ---------------------------------------------------------
 * Per-batch row bookkeeping shared by the kernels: for row t, seq[t], j[t] = index of the row
 * within its sequence, seq_T[seq] = rows of that sequence in the batch. */
typedef struct nx_gdn_rows {
    int T;
    const int32_t *seq;
    const int32_t *j;
    const int32_t *seq_T;
} nx_gdn_rows;

/* Causal depthwise conv1d + SiLU over channels [c0, c1) for all rows, with state update and
 * snapshots.  x: [T][C] pre-conv qkv; y: [T][C]; w: [C][Kc].  avx512: SiLU by the vectorised
 * nx_ops_silu_avx512 (only on an AVX-512 CPU). */
void nx_gdn_conv(const nx_rstate *rs, int layer, const nx_gdn_rows *rows, int Kc, int C,
                 const float *w, const float *x, float *y, int c0, int c1, bool avx512);

/* One layer's delta-rule recurrence over a batch (value_dim = Hv * d, key_dim = Hk * d). */
typedef struct nx_gdn_recur {
    const nx_rstate *rs;
    int layer;
    const nx_gdn_rows *rows;
    int Hk, Hv, d;          /* key heads, value heads, head size */
    const float *qkv;       /* [T][C] post-conv: q at 0, k at key_dim, v at 2*key_dim; q/k L2-normed, q scaled */
    int C;                  /* conv_dim, the row stride of qkv */
    const float *beta;      /* [T][Hv] beta after sigmoid */
    const float *g;         /* [T][Hv] log decay */
    const float *z;         /* [T][value_dim] output gate */
    const float *norm_w;    /* [d] gated RMSNorm weight */
    float eps;
    float *out;             /* [T][value_dim] */
    bool avx512;            /* the AVX-512 chain and SiLU (only on an AVX-512 CPU) */
} nx_gdn_recur;

/* Delta-rule recurrence + gated RMSNorm of the value heads [h0, h1). */
void nx_gdn_recurrence(const nx_gdn_recur *a, int h0, int h1);

#endif
