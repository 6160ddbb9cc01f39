/* moe.h - the mixture-of-experts FFN of a qwen35moe layer (model.h, nx_moe_weights).
 *
 * For each row f of the batch (llama.cpp's build_moe_ffn with softmax gating, norm_w, no scale,
 * plus qwen35moe's gated shared expert):
 *   p = softmax(router · f) over all n experts (max subtracted, sum in double);
 *   the k largest p, in descending order (equal p: lower expert id first);
 *   w_j = p_j / max(sum_j p_j, 6.103515625e-5)   (the sum in double, rounded to float);
 *   out = (...((w_0 y_0 + w_1 y_1) + w_2 y_2) ... + w_{k-1} y_{k-1}) + sigmoid(sh_gate_inp · f) s,
 *   y_j = down_e(silu(gate_e · f) * (up_e · f)) for e = expert j, s the same with the shared expert.
 *
 * Batching: the rows of a batch are grouped by expert, and each selected expert's three matrices
 * go through nx_matmul_groups once for all its rows (a 4-row verify reads an expert once, not 4
 * times); the gate and up products of all selected experts and the shared expert are one grouped
 * call, the down products another.  Every row's result is bit-identical whatever the batch:
 * routing is per row, each expert product of a row is the row's own nx_matmul result, and the
 * weighted sum has a fixed order.  Weights stay in the mapping (views, never copied).
 */
#ifndef NX_MOE_H
#define NX_MOE_H

#include "model/model.h"
#include "quant/matmul_groups.h"

/* Per-context scratch, grown with the largest batch (never shrunk). */
typedef struct nx_moe_scratch {
    int cap_T;
    float *logits;          /* [T][n_expert] router logits, then probabilities */
    int32_t *sel;           /* [T][k] selected experts, descending probability */
    float *wsel;            /* [T][k] their weights */
    int32_t *slot;          /* [T][k] row of the (row, expert) pair in the grouped buffers */
    int32_t *rows;          /* [T * k] batch row of each grouped slot, grouped by expert */
    int32_t *count;         /* [n_expert + 1] slots per expert, then prefix offsets */
    float *g, *u;           /* [T * k][n_ff_exp] gate / up (g becomes the SwiGLU product) */
    float *y;               /* [T * k][E] expert outputs */
    float *sg, *su;         /* [T][n_ff_shexp] shared expert gate / up */
    float *sy;              /* [T][E] shared expert output */
    float *sgate;           /* [T] shared expert gate logit */
    nx_mm_group *groups;    /* [2 * n_expert + 2] */
    nx_mm_groups_scratch mm;
    size_t bytes;
    bool avx512;
} nx_moe_scratch;

/* out[T][E] = FFN(x[T][E]) for the layer's MoE weights.  x and out must not overlap. */
bool nx_moe_ffn(nx_pool *pool, nx_moe_scratch *s, const nx_hparams *hp, const nx_moe_weights *w, const float *x,
                int T, float *out, nx_err *err);
void nx_moe_scratch_free(nx_moe_scratch *s);
/* Bytes the scratch holds now. */
size_t nx_moe_scratch_bytes(const nx_moe_scratch *s);

/* Routing of one row of router logits (exposed for tests): probabilities in place, the k selected
 * experts and their renormalised weights, exactly as nx_moe_ffn computes them. */
void nx_moe_route(float *logits, int n_expert, int k, int32_t *sel, float *wsel);

#endif
