/* gdn.h - Gated DeltaNet: the recurrent state with rollback slots, and the layer's kernels.
 *
 * State per GDN layer per sequence (reference §4.3, §4.6, §4.9), all F32:
 *   conv: [conv_dim][Kc-1]  the last Kc-1 pre-convolution qkv values per channel, oldest first;
 *   ssm:  [Hv][d][d]        delta-rule matrix per value head, element S[i][j] (i = key index,
 *                           j = value index) at j*d + i, as llama.cpp lays it out.
 *
 * Rollback slots: each sequence owns 1 + R slots (R = n_snapshots) of both arrays, stored as
 * planes [layer][slot][seq][...].  cur[seq] names the slot holding the current state.  A batch
 * with T_s rows of a sequence reads its input state from slot cur[seq] and writes:
 *   slot 0            the state after its last row (the new current state),
 *   slot k (1<=k<=R)  the state after row T_s-1-k, for k < T_s (a snapshot).
 * then cur[seq] = 0 and last_T[seq] = T_s.  No copy is made: each token's update reads the slot
 * the previous token wrote and writes straight into its own slot (rows older than the last 1 + R
 * update slot 0 in place), see out_slot() in gdn.c.  Rolling back r tokens (r < last_T, r <= R)
 * only sets cur[seq] = r: O(1).  The next batch's first row reads slot r; a head's (channel's)
 * slot is always read before that head (channel) writes it again.
 * Successive rollbacks add up (cur += r) while the total stays within those limits.
 */
#ifndef NX_GDN_H
#define NX_GDN_H

#include "common.h"

typedef struct nx_rstate {
    int n_layer, n_seq, n_slot;   /* n_slot = 1 + R */
    size_t conv_n;                /* (Kc-1) * conv_dim floats per (layer, slot, seq) */
    size_t ssm_n;                 /* d * d * Hv floats per (layer, slot, seq) */
    float *conv;
    float *ssm;                   /* 64-byte aligned inside ssm_mem */
    void *ssm_mem;
    int32_t *cur;                 /* [n_seq] slot holding the current state */
    int32_t *last_T;              /* [n_seq] rows of the last batch of that sequence (0 = none) */
} nx_rstate;

bool   nx_rstate_init(nx_rstate *rs, int n_layer, size_t conv_n, size_t ssm_n, int n_seq, int n_snapshots, nx_err *err);
void   nx_rstate_free(nx_rstate *rs);
size_t nx_rstate_bytes(const nx_rstate *rs);

static inline float *nx_rstate_conv(const nx_rstate *rs, int layer, int slot, int seq) {
    return rs->conv + (((size_t)layer * (size_t)rs->n_slot + (size_t)slot) * (size_t)rs->n_seq + (size_t)seq) * rs->conv_n;
}
static inline float *nx_rstate_ssm(const nx_rstate *rs, int layer, int slot, int seq) {
    return rs->ssm + (((size_t)layer * (size_t)rs->n_slot + (size_t)slot) * (size_t)rs->n_seq + (size_t)seq) * rs->ssm_n;
}

void nx_rstate_clear(nx_rstate *rs, int seq);                 /* zero state, cur = 0, no snapshots */
int  nx_rstate_max_rollback(const nx_rstate *rs, int seq);
bool nx_rstate_rollback(nx_rstate *rs, int seq, int r, nx_err *err);
void nx_rstate_copy(nx_rstate *rs, int src, int dst);         /* current state of src -> slot 0 of dst */
/* After a batch: every sequence with rows in it now has its state in slot 0. */
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

/* Delta-rule recurrence + gated RMSNorm for value heads [h0, h1).  qk: [T][C] post-conv
 * (q at 0, k at key_dim, v at 2*key_dim, q/k already L2-normed and q scaled); gate_b: [T][Hv]
 * beta (after sigmoid); gate_g: [T][Hv] g (log decay); z: [T][value_dim]; out: [T][value_dim]. */
void nx_gdn_recurrence(const nx_rstate *rs, int layer, const nx_gdn_rows *rows, int Hk, int Hv, int d,
                       const float *qkv, int C, const float *beta, const float *g, const float *z,
                       const float *norm_w, float eps, float *out, int h0, int h1, bool avx512);

#endif
