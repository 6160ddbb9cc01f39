/* seq_ckpt.c - recurrent-state checkpoints and rewinding beyond the snapshot slots (seq_ckpt.h). */
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
    memset(ck, 0, sizeof *ck);
}

bool nx_seq_ckpt_save(nx_seq_ckpt *ck, const nx_ctx *c, int32_t seq, nx_err *err) {
    if (seq < 0 || seq >= c->params.n_seq)
        return nx_fail(err, "checkpoint: sequence id %d out of range (context has %d sequences)", seq, c->params.n_seq);
    const nx_rstate *rs = &c->rs;
    if (!ck->conv || ck->n_layer != rs->n_layer || ck->conv_n != rs->conv_n || ck->ssm_n != rs->ssm_n) {
        nx_seq_ckpt_free(ck);
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
    const int cur = rs->cur[seq];
    for (int l = 0; l < rs->n_layer; l++) {
        memcpy(ck->conv + (size_t)l * rs->conv_n, nx_rstate_conv(rs, l, cur, seq), rs->conv_n * sizeof(float));
        nx_rstate_ssm_current(rs, l, seq, ck->ssm + (size_t)l * rs->ssm_n);
    }
    ck->seq = seq;
    ck->pos = c->kv.len[seq];
    return true;
}

bool nx_ctx_seq_rewind(nx_ctx *c, int32_t seq, int32_t to_pos, const nx_seq_ckpt *ck, const int32_t *tokens,
                       nx_rewind_kind *how, nx_err *err) {
    *how = NX_REWIND_NONE;
    if (seq < 0 || seq >= c->params.n_seq)
        return nx_fail(err, "rewind: sequence id %d out of range (context has %d sequences)", seq, c->params.n_seq);
    if (to_pos < 0) return nx_fail(err, "rewind: position %d is negative", to_pos);
    const int32_t n_past = c->kv.len[seq];
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
    nx_rstate *rs = &c->rs;
    for (int l = 0; l < rs->n_layer; l++) {
        memcpy(nx_rstate_conv(rs, l, 0, seq), ck->conv + (size_t)l * rs->conv_n, rs->conv_n * sizeof(float));
        memcpy(nx_rstate_ssm(rs, l, 0, seq), ck->ssm + (size_t)l * rs->ssm_n, rs->ssm_n * sizeof(float));
    }
    nx_rstate_commit(rs, seq, 0);
    c->kv.len[seq] = ck->pos;
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
