/* seq_ckpt.c - sequence checkpoints and rewinding beyond the snapshot slots (seq_ckpt.h). */
#include "forward/seq_ckpt.h"

#include <stdlib.h>
#include <string.h>

#include "forward/ctx_internal.h"

const char *nx_rewind_kind_name(nx_rewind_kind k) {
    switch (k) {
    case NX_REWIND_NONE: return "none";
    case NX_REWIND_SNAPSHOT: return "snapshot";
    case NX_REWIND_REDECODE: return "checkpoint+redecode";
    case NX_REWIND_CLEAR: return "clear";
    }
    return "?";
}

void nx_seq_ckpt_free(nx_seq_ckpt *ck) {
    nx_free_aligned(ck->conv);
    nx_free_aligned(ck->ssm);
    free(ck->k);
    free(ck->v);
    memset(ck, 0, sizeof *ck);
}

size_t nx_seq_ckpt_bytes_for(const nx_ctx *c, int32_t pos, bool with_kv) {
    const nx_rstate *rs = &c->rs;
    size_t b = (size_t)rs->n_layer * (rs->conv_n + rs->ssm_n) * sizeof(float);
    if (with_kv) b += nx_kv_cells_bytes_k(&c->kv, pos) + nx_kv_cells_bytes_v(&c->kv, pos);
    return b;
}

size_t nx_seq_ckpt_bytes(const nx_seq_ckpt *ck) {
    size_t b = (size_t)ck->n_layer * (ck->conv_n + ck->ssm_n) * sizeof(float);
    if (ck->has_kv)
        b += (size_t)ck->kv_layers * (size_t)ck->pos *
             (nx_kv_type_bytes(ck->kv_type_k, (size_t)ck->kv_dim) + nx_kv_type_bytes(ck->kv_type_v, (size_t)ck->kv_dim));
    return b;
}

bool nx_seq_ckpt_take(nx_seq_ckpt *ck, const nx_ctx *c, int32_t seq, bool with_kv, nx_err *err) {
    if (seq < 0 || seq >= c->params.n_seq)
        return nx_fail(err, "checkpoint: sequence id %d out of range (context has %d sequences)", seq, c->params.n_seq);
    const nx_rstate *rs = &c->rs;
    if (!ck->conv || ck->n_layer != rs->n_layer || ck->conv_n != rs->conv_n || ck->ssm_n != rs->ssm_n) {
        nx_free_aligned(ck->conv);
        nx_free_aligned(ck->ssm);
        ck->conv = ck->ssm = NULL;
        size_t nl = (size_t)(rs->n_layer > 0 ? rs->n_layer : 1);
        ck->conv = nx_alloc_aligned(nl * (rs->conv_n ? rs->conv_n : 1) * sizeof(float), "checkpoint", err);
        ck->ssm = ck->conv ? nx_alloc_aligned(nl * (rs->ssm_n ? rs->ssm_n : 1) * sizeof(float), "checkpoint", err) : NULL;
        if (!ck->ssm) {
            nx_seq_ckpt_free(ck);
            return false;
        }
        ck->n_layer = rs->n_layer;
        ck->conv_n = rs->conv_n;
        ck->ssm_n = rs->ssm_n;
    }
    const int32_t pos = nx_ctx_n_past(c, seq);
    ck->has_kv = false;
    if (with_kv) {
        const size_t bk = nx_kv_cells_bytes_k(&c->kv, pos), bv = nx_kv_cells_bytes_v(&c->kv, pos);
        if (bk > ck->kv_cap_k || bv > ck->kv_cap_v || !ck->k) {
            free(ck->k);
            free(ck->v);
            ck->kv_cap_k = ck->kv_cap_v = 0;
            ck->k = nx_malloc(bk ? bk : 1, "checkpoint KV", err);
            ck->v = ck->k ? nx_malloc(bv ? bv : 1, "checkpoint KV", err) : NULL;
            if (!ck->v) {
                free(ck->k);
                ck->k = NULL;
                return false;
            }
            ck->kv_cap_k = bk;
            ck->kv_cap_v = bv;
        }
        if (!nx_kv_export(&c->kv, seq, pos, ck->k, ck->v, err)) return false;
        ck->has_kv = true;
    }
    ck->kv_layers = c->kv.n_layer;
    ck->kv_dim = c->kv.kv_dim;
    ck->kv_type_k = c->kv.type_k;
    ck->kv_type_v = c->kv.type_v;
    const int cur = rs->cur[seq];
    for (int l = 0; l < rs->n_layer; l++) {
        memcpy(ck->conv + (size_t)l * rs->conv_n, nx_rstate_conv(rs, l, cur, seq), rs->conv_n * sizeof(float));
        nx_rstate_ssm_current(rs, l, seq, ck->ssm + (size_t)l * rs->ssm_n);
    }
    ck->seq = seq;
    ck->pos = pos;
    return true;
}

bool nx_seq_ckpt_save(nx_seq_ckpt *ck, const nx_ctx *c, int32_t seq, nx_err *err) {
    return nx_seq_ckpt_take(ck, c, seq, false, err);
}

bool nx_seq_ckpt_fits(const nx_ctx *c, const nx_seq_ckpt *ck, nx_err *err) {
    const nx_rstate *rs = &c->rs;
    if (!ck->conv) return nx_fail(err, "checkpoint is empty");
    if (ck->n_layer != rs->n_layer || (rs->n_layer > 0 && (ck->conv_n != rs->conv_n || ck->ssm_n != rs->ssm_n)))
        return nx_fail(err, "checkpoint: recurrent state of %d layers x (%zu + %zu) floats, the context has %d x "
                       "(%zu + %zu)", ck->n_layer, ck->conv_n, ck->ssm_n, rs->n_layer, rs->conv_n, rs->ssm_n);
    if (ck->kv_layers != c->kv.n_layer || ck->kv_dim != c->kv.kv_dim)
        return nx_fail(err, "checkpoint: attention cache of %d layers x %d values, the context has %d x %d",
                       ck->kv_layers, ck->kv_dim, c->kv.n_layer, c->kv.kv_dim);
    if (ck->has_kv && (ck->kv_type_k != c->kv.type_k || ck->kv_type_v != c->kv.type_v))
        return nx_fail(err, "checkpoint: attention cache types k %s / v %s, the context's are %s / %s",
                       nx_kv_type_name(ck->kv_type_k), nx_kv_type_name(ck->kv_type_v), nx_kv_type_name(c->kv.type_k),
                       nx_kv_type_name(c->kv.type_v));
    if (ck->pos < 0 || ck->pos >= c->params.n_ctx)
        return nx_fail(err, "checkpoint: position %d does not fit the context (n_ctx %d)", ck->pos, c->params.n_ctx);
    return true;
}

/* The recurrent state of ck into slot 0 of seq (no snapshots afterwards). */
static void put_rstate(nx_ctx *c, int32_t seq, const nx_seq_ckpt *ck) {
    nx_rstate *rs = &c->rs;
    for (int l = 0; l < rs->n_layer; l++) {
        memcpy(nx_rstate_conv(rs, l, 0, seq), ck->conv + (size_t)l * rs->conv_n, rs->conv_n * sizeof(float));
        memcpy(nx_rstate_ssm(rs, l, seq), ck->ssm + (size_t)l * rs->ssm_n, rs->ssm_n * sizeof(float));
    }
    nx_rstate_commit(rs, seq, 0);
}

bool nx_seq_ckpt_restore(nx_ctx *c, int32_t seq, const nx_seq_ckpt *ck, nx_err *err) {
    if (seq < 0 || seq >= c->params.n_seq)
        return nx_fail(err, "restore: sequence id %d out of range (context has %d sequences)", seq, c->params.n_seq);
    if (!nx_seq_ckpt_fits(c, ck, err)) return nx_fail_prefix(err, "restore into sequence %d", seq);
    if (!ck->has_kv) {
        if (seq != ck->seq)
            return nx_fail(err, "restore: a checkpoint without attention cells (taken from sequence %d) restores only "
                           "into that sequence, not %d", ck->seq, seq);
        if (nx_ctx_n_past(c, seq) < ck->pos)
            return nx_fail(err, "restore: sequence %d holds %d positions, the checkpoint without attention cells needs "
                           "its first %d", seq, nx_ctx_n_past(c, seq), ck->pos);
        nx_kv_truncate(&c->kv, seq, ck->pos);
    } else if (!nx_kv_import(&c->kv, seq, ck->pos, ck->k, ck->v, err)) {
        return false;
    }
    put_rstate(c, seq, ck);
    return true;
}

bool nx_ctx_seq_rewind(nx_ctx *c, int32_t seq, int32_t to_pos, const nx_seq_ckpt *ck, const int32_t *tokens,
                       nx_rewind_kind *how, nx_err *err) {
    *how = NX_REWIND_NONE;
    if (seq < 0 || seq >= c->params.n_seq)
        return nx_fail(err, "rewind: sequence id %d out of range (context has %d sequences)", seq, c->params.n_seq);
    if (to_pos < 0) return nx_fail(err, "rewind: position %d is negative", to_pos);
    const int32_t n_past = nx_kv_len(&c->kv, seq);
    if (to_pos >= n_past) return true;
    if (n_past - to_pos <= nx_ctx_seq_max_rollback(c, seq)) {
        if (!nx_ctx_seq_rollback(c, seq, n_past - to_pos, err)) return false;
        *how = NX_REWIND_SNAPSHOT;
        return true;
    }
    if (to_pos == 0) {
        *how = NX_REWIND_CLEAR;
        return nx_ctx_seq_clear(c, seq, err);
    }
    if (!ck || !ck->conv)
        return nx_fail(err, "sequence %d: cannot rewind %d tokens to position %d: snapshots cover %d and there is no "
                       "checkpoint", seq, n_past - to_pos, to_pos, nx_ctx_seq_max_rollback(c, seq));
    if (ck->seq != seq || ck->pos > to_pos || ck->n_layer != c->rs.n_layer || ck->conv_n != c->rs.conv_n)
        return nx_fail(err, "sequence %d: the checkpoint (sequence %d, position %d) cannot restore position %d", seq,
                       ck->seq, ck->pos, to_pos);
    if (to_pos > ck->pos && !tokens)
        return nx_fail(err, "sequence %d: re-decoding positions %d..%d needs the token history", seq, ck->pos,
                       to_pos - 1);
    /* restore: attention cells >= ck->pos are dropped, the recurrent state goes to slot 0 */
    put_rstate(c, seq, ck);
    nx_kv_truncate(&c->kv, seq, ck->pos);
    /* re-decode in chunks (hidden rows of every token, logits of the last) */
    enum { CHUNK = 256 };
    int32_t pos[CHUNK], sid[CHUNK];
    for (int32_t p0 = ck->pos; p0 < to_pos; p0 += CHUNK) {
        int32_t n = NX_MIN(CHUNK, to_pos - p0);
        for (int32_t i = 0; i < n; i++) {
            pos[i] = p0 + i;
            sid[i] = seq;
        }
        nx_batch b = {n, tokens + p0, pos, sid, NULL};
        if (!nx_forward(c, &b, err)) return nx_fail_prefix(err, "rewind: re-decoding positions %d..%d", p0, p0 + n - 1);
    }
    *how = NX_REWIND_REDECODE;
    return true;
}
