/* mtp.c - MTP head forward (llama.cpp graph_mtp, see mtp.h) on its own one-layer context (see mtp.h). */
#include "spec/mtp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward/ops.h"

bool nx_mtp_check_compatible(const nx_model *m, const char *m_where, const nx_model *trunk, nx_err *err) {
    const nx_hparams *a = &m->hp, *b = &trunk->hp;
    if (a->n_embd != b->n_embd)
        return nx_fail(err, "%s: MTP embedding_length %u does not match the model's %u", m_where, a->n_embd, b->n_embd);
    if (a->n_vocab != b->n_vocab)
        return nx_fail(err, "%s: MTP vocabulary has %u tokens, the model's has %u", m_where, a->n_vocab, b->n_vocab);
    if (m->mtp.embed.out != (int64_t)b->n_vocab || m->mtp.head.out != (int64_t)b->n_vocab)
        return nx_fail(err, "%s: MTP embedding/head rows (%lld/%lld) do not match the model's vocabulary %u", m_where,
                       (long long)m->mtp.embed.out, (long long)m->mtp.head.out, b->n_vocab);
    if (a->n_head != b->n_head || a->n_head_kv != b->n_head_kv || a->head_dim != b->head_dim || a->n_rot != b->n_rot)
        return nx_fail(err, "%s: MTP attention geometry (heads %u/%u, head dim %u, rope dims %u) differs from the "
                       "model's (%u/%u, %u, %u)", m_where, a->n_head, a->n_head_kv, a->head_dim, a->n_rot, b->n_head,
                       b->n_head_kv, b->head_dim, b->n_rot);
    if (a->eps != b->eps || a->rope_base != b->rope_base)
        return nx_fail(err, "%s: MTP rms epsilon %g / rope base %g differ from the model's %g / %g", m_where,
                       (double)a->eps, (double)a->rope_base, (double)b->eps, (double)b->rope_base);
    return true;
}

bool nx_mtp_head_from_model(nx_mtp_head *h, const nx_model *m, const nx_model *trunk, const char *where, nx_err *err) {
    memset(h, 0, sizeof *h);
    if (!m->mtp.present) return nx_fail(err, "%s: no MTP block bound", where);
    if (!nx_mtp_check_compatible(m, where, trunk, err)) return false;
    h->src = m;
    snprintf(h->source, sizeof h->source, "%s", where);
    /* the view: one attention layer (the MTP block), final norm = head_norm, LM head = MTP head */
    nx_model *v = &h->view;
    v->hp = m->hp;
    v->hp.n_layer_all = 1;
    v->hp.n_layer = 1;
    v->hp.n_mtp = 0;
    memset(v->hp.recurrent, 0, sizeof v->hp.recurrent);
    v->tok_embd = m->mtp.embed;
    v->output_norm = m->mtp.head_norm;
    v->output = m->mtp.head;
    v->layers = (nx_layer *)&m->mtp.layer; /* read only: the forward pass never writes weights */
    v->n_attn_layers = 1;
    v->n_gdn_layers = 0;
    return true;
}

void nx_mtp_head_free(nx_mtp_head *h) {
    if (!h) return;
    nx_free_aligned(h->draft_rows);
    free(h->draft_ids);
    nx_model_free(h->owned_file);
    free(h);
}

bool nx_mtp_head_set_draft_vocab(nx_mtp_head *h, const int32_t *ids, int32_t K, nx_err *err) {
    const nx_weight *w = &h->src->mtp.head;
    const int32_t V = (int32_t)h->view.hp.n_vocab;
    if (K < 0 || K > V) return nx_fail(err, "draft_vocab %d out of range (1..%d, the model's vocabulary)", K, V);
    nx_free_aligned(h->draft_rows);
    free(h->draft_ids);
    h->draft_rows = NULL;
    h->draft_ids = NULL;
    h->n_draft_vocab = 0;
    memset(&h->draft_head, 0, sizeof h->draft_head);
    if (K == 0) return true;
    bool *seen = nx_calloc((size_t)V, sizeof *seen, "draft vocabulary", err);
    if (!seen) return false;
    for (int32_t k = 0; k < K; k++) {
        if (ids[k] < 0 || ids[k] >= V || seen[ids[k]]) {
            bool dup = ids[k] >= 0 && ids[k] < V;
            free(seen);
            return dup ? nx_fail(err, "draft vocabulary: token id %d listed twice", ids[k])
                       : nx_fail(err, "draft vocabulary: token id %d out of range (vocabulary has %d tokens)", ids[k], V);
        }
        seen[ids[k]] = true;
    }
    free(seen);
    uint64_t bytes;
    if (!nx_mul_ok((uint64_t)K, w->row_bytes, &bytes)) return nx_fail(err, "draft vocabulary: head too large");
    h->draft_ids = nx_malloc((size_t)K * sizeof *h->draft_ids, "draft vocabulary", err);
    h->draft_rows = h->draft_ids ? nx_alloc_aligned((size_t)bytes, "draft vocabulary head rows", err) : NULL;
    if (!h->draft_rows) {
        free(h->draft_ids);
        h->draft_ids = NULL;
        return false;
    }
    /* rows are self-contained in every type (whole quantisation blocks), so a row copy is exact */
    for (int32_t k = 0; k < K; k++) {
        h->draft_ids[k] = ids[k];
        memcpy((char *)h->draft_rows + (size_t)k * w->row_bytes, (const char *)w->data + (size_t)ids[k] * w->row_bytes,
               w->row_bytes);
    }
    if (!nx_weight_init(&h->draft_head, h->draft_rows, w->type, w->in, K, err)) {
        nx_free_aligned(h->draft_rows);
        free(h->draft_ids);
        h->draft_rows = NULL;
        h->draft_ids = NULL;
        return nx_fail_prefix(err, "draft vocabulary");
    }
    h->n_draft_vocab = K;
    return true;
}

/* Loads only the MTP part of a file (trunk tensors may be absent). */
static bool load_mtp_file(nx_model **out, const char *path, nx_err *err) {
    *out = NULL;
    nx_gguf *g = NULL;
    if (!nx_gguf_open(&g, path, err)) return nx_fail_prefix(err, "MTP model");
    nx_hparams hp;
    nx_model *m = nx_calloc(1, sizeof *m, "MTP model", err);
    if (!m || !nx_hparams_from_gguf(&hp, g, err) || !nx_model_bind_mtp_only(m, &hp, nx_gguf_tensor_lookup, g, path, err)) {
        free(m);
        nx_gguf_close(g);
        return nx_fail_prefix(err, "MTP model");
    }
    m->gguf = g;
    *out = m;
    return true;
}

bool nx_mtp_head_open(nx_mtp_head **out, const nx_model *trunk, const char *trunk_path, const char *mtp_path,
                      char *notice, size_t notice_len, nx_err *err) {
    *out = NULL;
    if (notice_len) notice[0] = 0;
    nx_mtp_head *h = nx_calloc(1, sizeof *h, "MTP head", err);
    if (!h) return false;
    char sib[512];
    const char *path = mtp_path;
    if (!path && trunk->mtp.present) {
        if (!nx_mtp_head_from_model(h, trunk, trunk, trunk_path ? trunk_path : "model", err)) goto fail;
        *out = h;
        return true;
    }
    if (!path && trunk_path) {
        bool found;
        if (!nx_mtp_find_sibling(trunk_path, sib, sizeof sib, &found, err)) goto fail;
        if (found) path = sib;
    }
    if (!path) {
        snprintf(notice, notice_len, "no MTP head (the model has no MTP block and no mtp-*.gguf sits next to it): "
                 "plain decoding");
        free(h);
        return true;
    }
    nx_model *file;
    if (!load_mtp_file(&file, path, err)) goto fail;
    /* (nx_mtp_head_from_model clears *h, so owned_file is set after it) */
    if (!nx_mtp_head_from_model(h, file, trunk, path, err)) {
        nx_model_free(file);
        goto fail;
    }
    h->owned_file = file;
    *out = h;
    return true;
fail:
    nx_mtp_head_free(h);
    return false;
}

/* ---- the MTP context -------------------------------------------------------------------- */

struct nx_mtp {
    const nx_mtp_head *head;
    nx_ctx *ctx;
    nx_pool *pool;
    nx_matmul_scratch mm;
    int32_t cap;
    float *cat;  /* [cap][2E] [enorm(embed) ; hnorm(h)] */
    float *x0;   /* [cap][E] eh_proj output = the block's input */
    float *emb;  /* [E] one embedding row */
    /* reduced draft vocabulary (copied from the head at creation): K logits per asked row */
    int32_t K;
    const int32_t *ids;
    int32_t n_rows;      /* rows of the last batch */
    int32_t cap_out;
    int32_t *out_row;    /* [cap] row -> index into dlog, -1 = no logits */
    float *gath;         /* [cap_out][E] hout of the rows that asked for logits */
    float *dlog;         /* [cap_out][K] */
};

bool nx_mtp_create(nx_mtp **out, const nx_mtp_head *head, int32_t n_ctx, int32_t n_seq, nx_kv_type kv_type,
                   nx_kv_type kv_type_v, nx_pool *pool, nx_err *err) {
    *out = NULL;
    nx_mtp *m = nx_calloc(1, sizeof *m, "MTP context", err);
    if (!m) return false;
    m->head = head;
    m->pool = pool;
    m->K = head->n_draft_vocab;
    m->ids = head->draft_ids;
    nx_ctx_params p = nx_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_seq = n_seq;
    p.n_snapshots = 0;
    p.kv_type = kv_type;
    p.kv_type_v = kv_type_v;
    m->emb = nx_alloc_aligned((size_t)head->view.hp.n_embd * sizeof(float), "MTP scratch", err);
    if (!m->emb || !nx_ctx_create(&m->ctx, &head->view, &p, pool, err)) {
        nx_mtp_free(m);
        return nx_fail_prefix(err, "MTP context");
    }
    *out = m;
    return true;
}

void nx_mtp_free(nx_mtp *m) {
    if (!m) return;
    nx_ctx_free(m->ctx);
    nx_matmul_scratch_free(&m->mm);
    nx_free_aligned(m->cat);
    nx_free_aligned(m->x0);
    nx_free_aligned(m->emb);
    free(m->out_row);
    nx_free_aligned(m->gath);
    nx_free_aligned(m->dlog);
    free(m);
}

static bool grow(nx_mtp *m, int32_t n, nx_err *err) {
    if (n <= m->cap) return true;
    const size_t E = m->head->view.hp.n_embd;
    nx_free_aligned(m->cat);
    nx_free_aligned(m->x0);
    m->cap = 0;
    m->cat = nx_alloc_aligned((size_t)n * 2 * E * sizeof(float), "MTP scratch", err);
    m->x0 = m->cat ? nx_alloc_aligned((size_t)n * E * sizeof(float), "MTP scratch", err) : NULL;
    free(m->out_row);
    m->out_row = m->x0 ? nx_malloc((size_t)n * sizeof *m->out_row, "MTP scratch", err) : NULL;
    if (!m->out_row) return false;
    m->cap = n;
    return true;
}

/* The reduced head: logits over the K draft tokens for the rows that asked (hout rows of the
 * forward pass times the repacked K x E head). */
static bool reduced_logits(nx_mtp *m, int32_t n, const int8_t *logits, nx_err *err) {
    const size_t E = m->head->view.hp.n_embd;
    const float *hid = nx_ctx_hidden(m->ctx);
    int32_t n_out = 0;
    for (int32_t t = 0; t < n; t++) m->out_row[t] = logits[t] ? n_out++ : -1;
    if (n_out == 0) return true;
    if (n_out > m->cap_out) {
        nx_free_aligned(m->gath);
        nx_free_aligned(m->dlog);
        m->cap_out = 0;
        m->gath = nx_alloc_aligned((size_t)n_out * E * sizeof(float), "MTP draft logits", err);
        m->dlog = m->gath ? nx_alloc_aligned((size_t)n_out * (size_t)m->K * sizeof(float), "MTP draft logits", err) : NULL;
        if (!m->dlog) return false;
        m->cap_out = n_out;
    }
    const float *src = hid;
    if (n_out != n) {
        for (int32_t t = 0; t < n; t++)
            if (m->out_row[t] >= 0) memcpy(m->gath + (size_t)m->out_row[t] * E, hid + (size_t)t * E, E * sizeof(float));
        src = m->gath;
    }
    return nx_matmul(m->pool, &m->mm, &m->head->draft_head, src, n_out, m->dlog, err) ? true
           : nx_fail_prefix(err, "MTP draft head");
}

bool nx_mtp_forward(nx_mtp *m, int32_t n, const int32_t *token, const int32_t *pos, const int32_t *seq_id,
                    const float *h, const int8_t *logits, nx_err *err) {
    const nx_model *src = m->head->src;
    const nx_hparams *hp = &m->head->view.hp;
    const size_t E = hp->n_embd;
    if (n <= 0) return nx_fail(err, "MTP batch: n_tokens = %d (must be > 0)", n);
    if (!token || !pos || !h) return nx_fail(err, "MTP batch: token, pos and hidden rows are required");
    if (!grow(m, n, err)) return false;
    /* rows are few (a draft step or a verify batch): the norms are cheap next to the matmuls */
    for (int32_t t = 0; t < n; t++) {
        float *c = m->cat + (size_t)t * 2 * E;
        if (!nx_embed_row(&src->mtp.embed, token[t], m->emb, err)) return nx_fail_prefix(err, "MTP batch row %d", t);
        nx_rmsnorm(m->emb, src->mtp.enorm, c, (int64_t)E, hp->eps);          /* embedding first */
        nx_rmsnorm(h + (size_t)t * E, src->mtp.hnorm, c + E, (int64_t)E, hp->eps); /* then the hidden */
    }
    if (!nx_matmul(m->pool, &m->mm, &src->mtp.eh_proj, m->cat, n, m->x0, err)) return nx_fail_prefix(err, "MTP eh_proj");
    int8_t *lg = NULL;
    int8_t lg_stack[64];
    const bool reduced = m->K > 0;
    m->n_rows = 0;
    if (!logits || reduced) {
        /* nx_batch.logits NULL would mean "last row": ask for none explicitly (with a reduced
         * vocabulary the full-vocabulary head is never run; reduced_logits does the rows) */
        lg = n <= 64 ? lg_stack : nx_malloc((size_t)n, "MTP batch", err);
        if (!lg) return false;
        memset(lg, 0, (size_t)n);
    }
    nx_batch b = {n, token, pos, seq_id, lg ? lg : logits};
    bool ok = nx_forward_embd(m->ctx, &b, m->x0, err);
    if (lg && lg != lg_stack) free(lg);
    if (!ok) return nx_fail_prefix(err, "MTP");
    if (reduced) {
        for (int32_t t = 0; t < n; t++) m->out_row[t] = -1;
        if (logits && !reduced_logits(m, n, logits, err)) return false;
    }
    m->n_rows = n;
    return true;
}

const float *nx_mtp_logits(const nx_mtp *m, int32_t row) {
    if (m->K == 0) return nx_ctx_logits(m->ctx, row);
    if (row < 0 || row >= m->n_rows || m->out_row[row] < 0) return NULL;
    return m->dlog + (size_t)m->out_row[row] * (size_t)m->K;
}
int32_t nx_mtp_n_logits(const nx_mtp *m) { return m->K > 0 ? m->K : (int32_t)m->head->view.hp.n_vocab; }
const int32_t *nx_mtp_logit_ids(const nx_mtp *m) { return m->K > 0 ? m->ids : NULL; }
const float *nx_mtp_hidden(const nx_mtp *m) { return nx_ctx_hidden(m->ctx); }
int32_t nx_mtp_n_past(const nx_mtp *m, int32_t seq) { return nx_ctx_n_past(m->ctx, seq); }
bool nx_mtp_truncate(nx_mtp *m, int32_t seq, int32_t from_pos, nx_err *err) {
    return nx_ctx_seq_truncate(m->ctx, seq, from_pos, err);
}
bool nx_mtp_clear(nx_mtp *m, int32_t seq, nx_err *err) { return nx_ctx_seq_clear(m->ctx, seq, err); }
int32_t nx_mtp_n_embd(const nx_mtp *m) { return (int32_t)m->head->view.hp.n_embd; }
int32_t nx_mtp_n_vocab(const nx_mtp *m) { return (int32_t)m->head->view.hp.n_vocab; }
nx_ctx *nx_mtp_ctx(nx_mtp *m) { return m->ctx; }
