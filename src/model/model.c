/* model.c - qwen35 / qwen35moe hyper-parameter checks and weight binding (the GGUF keys and tensor names llama.cpp's
 * qwen35 / qwen35moe loader reads: src/llama-model.cpp, src/llama-arch.cpp). */
#include "model/model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant/quant.h"

/* ---- hyper-parameters ------------------------------------------------------------------- */

bool nx_hparams_finish(nx_hparams *hp, const char *where, nx_err *err) {
    const char *a = nx_hp_arch(hp);
    if (hp->n_layer_all == 0 || hp->n_layer_all > NX_MAX_LAYERS)
        return nx_fail(err, "%s: %s.block_count = %u (must be 1..%d)", where, a, hp->n_layer_all, NX_MAX_LAYERS);
    if (hp->n_mtp >= hp->n_layer_all)
        return nx_fail(err, "%s: %s.nextn_predict_layers = %u must be < block_count = %u", where, a, hp->n_mtp,
                       hp->n_layer_all);
    if (hp->n_mtp > 1)
        return nx_fail(err, "%s: %s.nextn_predict_layers = %u; only 0 or 1 MTP layer is supported", where, a,
                       hp->n_mtp);
    hp->n_layer = hp->n_layer_all - hp->n_mtp;
    if (hp->n_embd == 0 || hp->n_head == 0 || hp->head_dim == 0 || (!hp->moe && hp->n_ff == 0) || hp->n_vocab == 0)
        return nx_fail(err, "%s: zero size (embedding_length %u, head_count %u, key_length %u, "
                       "feed_forward_length %u, vocab %u)", where, hp->n_embd, hp->n_head, hp->head_dim,
                       hp->n_ff, hp->n_vocab);
    if (hp->moe) {
        if (hp->n_expert == 0 || hp->n_expert > NX_MAX_EXPERTS)
            return nx_fail(err, "%s: %s.expert_count = %u (must be 1..%d)", where, a, hp->n_expert, NX_MAX_EXPERTS);
        if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
            return nx_fail(err, "%s: %s.expert_used_count = %u must be in 1..expert_count (%u)", where, a,
                           hp->n_expert_used, hp->n_expert);
        if (hp->n_ff_exp == 0 || hp->n_ff_shexp == 0)
            return nx_fail(err, "%s: expert width %u / shared expert width %u is 0 (%s.expert_feed_forward_length "
                           "and expert_shared_feed_forward_length absent, and feed_forward_length = %u)", where,
                           hp->n_ff_exp, hp->n_ff_shexp, a, hp->n_ff);
    }
    if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv != 0)
        return nx_fail(err, "%s: attention.head_count = %u is not a multiple of head_count_kv = %u", where,
                       hp->n_head, hp->n_head_kv);
    if (hp->n_rot == 0 || hp->n_rot % 2 != 0 || hp->n_rot > hp->head_dim)
        return nx_fail(err, "%s: rope.dimension_count = %u must be even and in 2..key_length (%u)", where,
                       hp->n_rot, hp->head_dim);
    if (hp->ssm_n_group == 0 || hp->ssm_dt_rank == 0 || hp->ssm_d_state == 0 || hp->ssm_conv_kernel == 0)
        return nx_fail(err, "%s: zero ssm size (group_count %u, time_step_rank %u, state_size %u, conv_kernel %u)",
                       where, hp->ssm_n_group, hp->ssm_dt_rank, hp->ssm_d_state, hp->ssm_conv_kernel);
    if (hp->ssm_d_state > 512 || hp->head_dim > NX_MAX_HEAD_DIM)
        return nx_fail(err, "%s: ssm.state_size = %u (max 512) or key_length = %u (max 1024) too large", where,
                       hp->ssm_d_state, hp->head_dim);
    if (hp->ssm_conv_kernel > 16)
        return nx_fail(err, "%s: ssm.conv_kernel = %u (at most 16 supported)", where, hp->ssm_conv_kernel);
    if (hp->ssm_dt_rank % hp->ssm_n_group != 0)
        return nx_fail(err, "%s: ssm.time_step_rank (value heads) = %u is not a multiple of ssm.group_count "
                       "(key heads) = %u", where, hp->ssm_dt_rank, hp->ssm_n_group);
    if (hp->ssm_d_inner % hp->ssm_dt_rank != 0 || hp->ssm_d_inner / hp->ssm_dt_rank != hp->ssm_d_state)
        return nx_fail(err, "%s: value head dim ssm.inner_size / time_step_rank = %u / %u must equal "
                       "ssm.state_size = %u", where, hp->ssm_d_inner, hp->ssm_dt_rank, hp->ssm_d_state);
    if (!(hp->eps > 0.0f) || !(hp->rope_base > 0.0f))
        return nx_fail(err, "%s: layer_norm_rms_epsilon = %g and rope.freq_base = %g must be > 0", where,
                       (double)hp->eps, (double)hp->rope_base);
    return true;
}

/* ---- binding ------------------------------------------------------------------------------ */

typedef struct binder {
    nx_model *m;
    nx_tensor_lookup_fn lookup;
    void *user;
    const char *where;
} binder;

static void fmt_shape(char *buf, size_t n, uint32_t n_dims, const uint64_t *ne) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "{");
    for (uint32_t i = 0; i < n_dims && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu", i ? ", " : "", (unsigned long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, "}");
}

/* Finds `name` and checks it has exactly the dims `want` (trailing 1s ignored).
 * *found = false and true returned when absent and optional. */
static bool find_checked(binder *b, const char *name, uint32_t n_want, const uint64_t *want, bool required,
                         nx_tensor_info *ti, bool *found, nx_err *err) {
    *found = false;
    if (!b->lookup(b->user, name, ti)) {
        if (required) return nx_fail(err, "%s: missing tensor '%s'", b->where, name);
        return true;
    }
    uint64_t have[4] = {1, 1, 1, 1};
    for (uint32_t i = 0; i < ti->n_dims && i < 4; i++) have[i] = ti->ne[i];
    bool ok = ti->n_dims <= 4;
    for (uint32_t i = 0; i < 4; i++) ok = ok && have[i] == (i < n_want ? want[i] : 1);
    if (!ok) {
        char hs[96], ws[96];
        fmt_shape(hs, sizeof hs, ti->n_dims, ti->ne);
        fmt_shape(ws, sizeof ws, n_want, want);
        return nx_fail(err, "%s: tensor '%s' has shape %s, expected %s", b->where, name, hs, ws);
    }
    const nx_type_traits *tt = nx_type_get(ti->type);
    if (!tt || !tt->to_float)
        return nx_fail(err, "%s: tensor '%s' has unsupported type %s", b->where, name, nx_type_name(ti->type));
    if (!ti->data) return nx_fail(err, "%s: tensor '%s' has no data", b->where, name);
    *found = true;
    return true;
}

static bool bind_matrix(binder *b, const char *name, int64_t in, int64_t out, bool required, nx_weight *w,
                        bool *found, nx_err *err) {
    uint64_t want[2] = {(uint64_t)in, (uint64_t)out};
    nx_tensor_info ti;
    bool f;
    if (!find_checked(b, name, 2, want, required, &ti, &f, err)) return false;
    if (found) *found = f;
    if (!f) return true;
    if (!nx_vec_dot_for(ti.type, NX_ISA_SCALAR))
        return nx_fail(err, "%s: tensor '%s' has type %s, which has no matrix kernel", b->where, name,
                       nx_type_name(ti.type));
    if (!nx_weight_init(w, ti.data, ti.type, in, out, err))
        return nx_fail_prefix(err, "%s: tensor '%s'", b->where, name);
    b->m->weight_bytes += w->row_bytes * (uint64_t)out;
    return true;
}

/* A small tensor of `n` elements (`n_dims`/`want` describe its shape) as F32: in place when
 * the file stores F32, else converted into a model-owned copy. */
static bool bind_floats(binder *b, const char *name, uint32_t n_dims, const uint64_t *want, bool required,
                        const float **out, nx_err *err) {
    nx_tensor_info ti;
    bool f;
    *out = NULL;
    if (!find_checked(b, name, n_dims, want, required, &ti, &f, err)) return false;
    if (!f) return true;
    uint64_t n = 1;
    for (uint32_t i = 0; i < n_dims; i++) n *= want[i];
    if (ti.type == NX_TYPE_F32) {
        if ((uintptr_t)ti.data % sizeof(float) != 0)
            return nx_fail(err, "%s: tensor '%s' data is not 4-byte aligned", b->where, name);
        *out = ti.data;
        b->m->weight_bytes += n * 4;
        return true;
    }
    const nx_type_traits *tt = nx_type_get(ti.type);
    if (n % (uint64_t)tt->block_size != 0)
        return nx_fail(err, "%s: tensor '%s' (%s) has %llu elements, not a multiple of its block size", b->where,
                       name, tt->name, (unsigned long long)n);
    nx_model *m = b->m;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        float **p = realloc(m->owned, (size_t)cap * sizeof *p);
        if (!p) return nx_fail(err, "out of memory binding '%s'", name);
        m->owned = p;
        m->cap_owned = cap;
    }
    float *dst = nx_malloc(n * sizeof(float), name, err);
    if (!dst) return false;
    tt->to_float(ti.data, dst, (int64_t)n);
    m->owned[m->n_owned++] = dst;
    b->m->weight_bytes += n * 4;
    *out = dst;
    return true;
}

static bool bind_vec(binder *b, const char *name, uint64_t n, const float **out, nx_err *err) {
    uint64_t want[1] = {n};
    return bind_floats(b, name, 1, want, true, out, err);
}

/* Attention + FFN tensors shared by trunk attention layers and the MTP block. */
static bool bind_attn(binder *b, const nx_hparams *hp, int li, nx_layer *l, nx_err *err) {
    char name[128];
    int64_t E = hp->n_embd, HD = (int64_t)hp->n_head * hp->head_dim, KV = nx_hp_kv_dim(hp);
#define MAT(sfx, in, out, dst) \
    snprintf(name, sizeof name, "blk.%d." sfx, li); \
    if (!bind_matrix(b, name, in, out, true, dst, NULL, err)) return false
    MAT("attn_q.weight", E, 2 * HD, &l->attn.q);
    MAT("attn_k.weight", E, KV, &l->attn.k);
    MAT("attn_v.weight", E, KV, &l->attn.v);
    MAT("attn_output.weight", HD, E, &l->attn.o);
#undef MAT
    snprintf(name, sizeof name, "blk.%d.attn_q_norm.weight", li);
    if (!bind_vec(b, name, hp->head_dim, &l->attn.q_norm, err)) return false;
    snprintf(name, sizeof name, "blk.%d.attn_k_norm.weight", li);
    if (!bind_vec(b, name, hp->head_dim, &l->attn.k_norm, err)) return false;
    return true;
}

/* A stacked expert tensor {in, out, n_expert} as the view of expert 0 plus the byte stride
 * between experts.  *found = false when absent and optional. */
static bool bind_experts(binder *b, const char *name, int64_t in, int64_t out, int64_t n_expert, bool required,
                         nx_weight *w, size_t *stride, bool *found, nx_err *err) {
    uint64_t want[3] = {(uint64_t)in, (uint64_t)out, (uint64_t)n_expert};
    nx_tensor_info ti;
    bool f;
    if (!find_checked(b, name, 3, want, required, &ti, &f, err)) return false;
    if (found) *found = f;
    if (!f) return true;
    if (!nx_vec_dot_for(ti.type, NX_ISA_SCALAR))
        return nx_fail(err, "%s: tensor '%s' has type %s, which has no matrix kernel", b->where, name,
                       nx_type_name(ti.type));
    if (!nx_weight_init(w, ti.data, ti.type, in, out, err))
        return nx_fail_prefix(err, "%s: tensor '%s'", b->where, name);
    *stride = w->row_bytes * (size_t)out;
    b->m->weight_bytes += (uint64_t)*stride * (uint64_t)n_expert;
    b->m->expert_bytes += (uint64_t)*stride * (uint64_t)n_expert;
    return true;
}

/* The mixture-of-experts FFN (model.h, nx_moe_weights) with llama.cpp's tensor set: router,
 * fused ffn_gate_up_exps or stacked ffn_gate_exps + ffn_up_exps, ffn_down_exps, and the shared
 * expert with its sigmoid gate. */
static bool bind_moe(binder *b, const nx_hparams *hp, int li, nx_layer *l, nx_err *err) {
    char name[128], other[128];
    const int64_t E = hp->n_embd, F = hp->n_ff_exp, S = hp->n_ff_shexp, N = hp->n_expert;
    nx_moe_weights *w = &l->moe;
    l->is_moe = true;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp.weight", li);
    if (!bind_matrix(b, name, E, N, true, &w->router, NULL, err)) return false;
    bool fused;
    nx_weight gu;
    size_t gu_stride;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_up_exps.weight", li);
    if (!bind_experts(b, name, E, 2 * F, N, false, &gu, &gu_stride, &fused, err)) return false;
    if (fused) {
        nx_tensor_info ti;
        snprintf(other, sizeof other, "blk.%d.ffn_gate_exps.weight", li);
        bool dup = b->lookup(b->user, other, &ti);
        if (!dup) {
            snprintf(other, sizeof other, "blk.%d.ffn_up_exps.weight", li);
            dup = b->lookup(b->user, other, &ti);
        }
        if (dup)
            return nx_fail(err, "%s: both '%s' and '%s' present (the fused and the stacked expert layout "
                           "exclude each other)", b->where, name, other);
        w->fused_gate_up = true;
        w->gate = gu;
        w->gate.out = F;
        w->up = w->gate;
        w->up.data = (const char *)gu.data + (size_t)F * gu.row_bytes;
        w->gate_stride = w->up_stride = gu_stride;
    } else {
        snprintf(name, sizeof name, "blk.%d.ffn_gate_exps.weight", li);
        if (!bind_experts(b, name, E, F, N, true, &w->gate, &w->gate_stride, NULL, err)) return false;
        snprintf(name, sizeof name, "blk.%d.ffn_up_exps.weight", li);
        if (!bind_experts(b, name, E, F, N, true, &w->up, &w->up_stride, NULL, err)) return false;
    }
    snprintf(name, sizeof name, "blk.%d.ffn_down_exps.weight", li);
    if (!bind_experts(b, name, F, E, N, true, &w->down, &w->down_stride, NULL, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_inp_shexp.weight", li);
    if (!bind_matrix(b, name, E, 1, true, &w->sh_gate_inp, NULL, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ffn_gate_shexp.weight", li);
    if (!bind_matrix(b, name, E, S, true, &w->sh_gate, NULL, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ffn_up_shexp.weight", li);
    if (!bind_matrix(b, name, E, S, true, &w->sh_up, NULL, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ffn_down_shexp.weight", li);
    if (!bind_matrix(b, name, S, E, true, &w->sh_down, NULL, err)) return false;
    return true;
}

static bool bind_common(binder *b, const nx_hparams *hp, int li, nx_layer *l, nx_err *err) {
    char name[128];
    int64_t E = hp->n_embd, F = hp->n_ff;
    snprintf(name, sizeof name, "blk.%d.attn_norm.weight", li);
    if (!bind_vec(b, name, E, &l->attn_norm, err)) return false;
    snprintf(name, sizeof name, "blk.%d.post_attention_norm.weight", li);
    if (!bind_vec(b, name, E, &l->post_norm, err)) return false;
    if (hp->moe) return bind_moe(b, hp, li, l, err);
    snprintf(name, sizeof name, "blk.%d.ffn_gate.weight", li);
    if (!bind_matrix(b, name, E, F, true, &l->ffn_gate, NULL, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ffn_up.weight", li);
    if (!bind_matrix(b, name, E, F, true, &l->ffn_up, NULL, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ffn_down.weight", li);
    if (!bind_matrix(b, name, F, E, true, &l->ffn_down, NULL, err)) return false;
    return true;
}

static bool bind_gdn(binder *b, const nx_hparams *hp, int li, nx_layer *l, nx_err *err) {
    char name[128];
    int64_t E = hp->n_embd, C = nx_hp_conv_dim(hp), VD = nx_hp_value_dim(hp), Hv = hp->ssm_dt_rank;
#define MAT(sfx, in, out, dst) \
    snprintf(name, sizeof name, "blk.%d." sfx, li); \
    if (!bind_matrix(b, name, in, out, true, dst, NULL, err)) return false
    MAT("attn_qkv.weight", E, C, &l->gdn.qkv);
    MAT("attn_gate.weight", E, VD, &l->gdn.gate);
    MAT("ssm_beta.weight", E, Hv, &l->gdn.beta);
    MAT("ssm_alpha.weight", E, Hv, &l->gdn.alpha);
    MAT("ssm_out.weight", VD, E, &l->gdn.out);
#undef MAT
    uint64_t conv_shape[2] = {hp->ssm_conv_kernel, (uint64_t)C};
    snprintf(name, sizeof name, "blk.%d.ssm_conv1d.weight", li);
    if (!bind_floats(b, name, 2, conv_shape, true, &l->gdn.conv1d, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ssm_dt.bias", li);
    if (!bind_vec(b, name, (uint64_t)Hv, &l->gdn.dt_bias, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ssm_a", li);
    if (!bind_vec(b, name, (uint64_t)Hv, &l->gdn.a, err)) return false;
    snprintf(name, sizeof name, "blk.%d.ssm_norm.weight", li);
    if (!bind_vec(b, name, hp->ssm_d_state, &l->gdn.norm, err)) return false;
    return true;
}

static bool bind_mtp(binder *b, const nx_hparams *hp, nx_err *err) {
    nx_model *m = b->m;
    nx_mtp_weights *t = &m->mtp;
    int li = (int)hp->n_layer;
    char name[128];
    int64_t E = hp->n_embd, V = hp->n_vocab;
    uint64_t before = m->weight_bytes, before_exp = m->expert_bytes;
    t->layer.recurrent = false;
    t->layer.cache_index = 0;
    if (!bind_common(b, hp, li, &t->layer, err) || !bind_attn(b, hp, li, &t->layer, err)) return false;
    snprintf(name, sizeof name, "blk.%d.nextn.eh_proj.weight", li);
    if (!bind_matrix(b, name, 2 * E, E, true, &t->eh_proj, NULL, err)) return false;
    snprintf(name, sizeof name, "blk.%d.nextn.enorm.weight", li);
    if (!bind_vec(b, name, (uint64_t)E, &t->enorm, err)) return false;
    snprintf(name, sizeof name, "blk.%d.nextn.hnorm.weight", li);
    if (!bind_vec(b, name, (uint64_t)E, &t->hnorm, err)) return false;
    uint64_t vshape[1] = {(uint64_t)E};
    snprintf(name, sizeof name, "blk.%d.nextn.shared_head_norm.weight", li);
    if (!bind_floats(b, name, 1, vshape, false, &t->head_norm, err)) return false;
    if (!t->head_norm) t->head_norm = m->output_norm;
    bool found;
    snprintf(name, sizeof name, "blk.%d.nextn.embed_tokens.weight", li);
    if (!bind_matrix(b, name, E, V, false, &t->embed, &found, err)) return false;
    if (!found) t->embed = m->tok_embd;
    snprintf(name, sizeof name, "blk.%d.nextn.shared_head_head.weight", li);
    if (!bind_matrix(b, name, E, V, false, &t->head, &found, err)) return false;
    if (!found) t->head = m->output;
    m->weight_bytes = before; /* weight_bytes and expert_bytes count the trunk only */
    m->expert_bytes = before_exp;
    t->present = true;
    return true;
}

bool nx_model_bind(nx_model *m, const nx_hparams *hp, nx_tensor_lookup_fn lookup, void *user, const char *where,
                   bool want_mtp, nx_err *err) {
    memset(m, 0, sizeof *m);
    m->hp = *hp;
    if (!nx_hparams_finish(&m->hp, where, err)) return false;
    hp = &m->hp;
    binder b = {m, lookup, user, where};
    int64_t E = hp->n_embd, V = hp->n_vocab;
    bool ok = false, found;
    if (!bind_matrix(&b, "token_embd.weight", E, V, true, &m->tok_embd, NULL, err)) goto done;
    if (!bind_vec(&b, "output_norm.weight", (uint64_t)E, &m->output_norm, err)) goto done;
    if (!bind_matrix(&b, "output.weight", E, V, false, &m->output, &found, err)) goto done;
    m->tied = !found;
    if (m->tied) m->output = m->tok_embd;
    m->layers = nx_calloc(hp->n_layer, sizeof *m->layers, "model layers", err);
    if (!m->layers) goto done;
    for (uint32_t i = 0; i < hp->n_layer; i++) {
        nx_layer *l = &m->layers[i];
        l->recurrent = hp->recurrent[i];
        l->cache_index = l->recurrent ? m->n_gdn_layers++ : m->n_attn_layers++;
        if (!bind_common(&b, hp, (int)i, l, err)) goto done;
        if (l->recurrent ? !bind_gdn(&b, hp, (int)i, l, err) : !bind_attn(&b, hp, (int)i, l, err)) goto done;
    }
    if (m->n_attn_layers == 0) {
        nx_fail(err, "%s: the trunk has no attention layer (full_attention_interval %u, %u layers)", where,
                hp->full_attn_interval, hp->n_layer);
        goto done;
    }
    if (want_mtp && hp->n_mtp == 1 && !bind_mtp(&b, hp, err)) goto done;
    ok = true;
done:
    if (!ok) nx_model_release(m);
    return ok;
}

bool nx_model_bind_mtp_only(nx_model *m, const nx_hparams *hp, nx_tensor_lookup_fn lookup, void *user,
                            const char *where, nx_err *err) {
    memset(m, 0, sizeof *m);
    m->hp = *hp;
    if (!nx_hparams_finish(&m->hp, where, err)) return false;
    hp = &m->hp;
    if (hp->n_mtp != 1)
        return nx_fail(err, "%s: no MTP block (%s.nextn_predict_layers = %u, expected 1)", where, nx_hp_arch(hp),
                       hp->n_mtp);
    binder b = {m, lookup, user, where};
    int64_t E = hp->n_embd, V = hp->n_vocab;
    bool found;
    bool ok = bind_matrix(&b, "token_embd.weight", E, V, true, &m->tok_embd, NULL, err) &&
              bind_vec(&b, "output_norm.weight", (uint64_t)E, &m->output_norm, err) &&
              bind_matrix(&b, "output.weight", E, V, false, &m->output, &found, err);
    if (ok) {
        m->tied = !found;
        if (m->tied) m->output = m->tok_embd;
        ok = bind_mtp(&b, hp, err);
    }
    if (!ok) nx_model_release(m);
    return ok;
}

void nx_model_release(nx_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    m->owned = NULL;
    m->layers = NULL;
    m->n_owned = m->cap_owned = 0;
}

bool nx_embed_row(const nx_weight *emb, int32_t token, float *out, nx_err *err) {
    if (token < 0 || token >= emb->out)
        return nx_fail(err, "token id %d out of range (vocabulary has %lld tokens)", token, (long long)emb->out);
    const nx_type_traits *tt = nx_type_get(emb->type);
    tt->to_float((const uint8_t *)emb->data + (size_t)token * emb->row_bytes, out, emb->in);
    return true;
}

/* FNV-1a 64 over bytes. */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ULL;
    return h;
}

uint64_t nx_model_fingerprint(const nx_model *m) {
    const nx_hparams *hp = &m->hp;
    uint64_t h = 0xcbf29ce484222325ULL;
    const uint32_t u[] = {hp->n_embd, hp->n_layer_all, hp->n_layer, hp->n_mtp, hp->n_ff, hp->n_head, hp->n_head_kv,
                          hp->head_dim, hp->n_rot, hp->ssm_conv_kernel, hp->ssm_d_state, hp->ssm_n_group,
                          hp->ssm_dt_rank, hp->ssm_d_inner, hp->full_attn_interval, hp->n_vocab};
    h = fnv(h, u, sizeof u);
    h = fnv(h, &hp->eps, sizeof hp->eps);
    h = fnv(h, &hp->rope_base, sizeof hp->rope_base);
    h = fnv(h, hp->rope_sections, sizeof hp->rope_sections);
    for (uint32_t l = 0; l < hp->n_layer_all && l < NX_MAX_LAYERS; l++) h = fnv(h, &hp->recurrent[l], 1);
    const nx_gguf *g = m->gguf;
    for (uint64_t i = 0; g && i < g->n_tensors; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        h = fnv(h, t->name.ptr, (size_t)t->name.len);
        h = fnv(h, &t->n_dims, sizeof t->n_dims);
        h = fnv(h, t->ne, sizeof t->ne);
        h = fnv(h, &t->type, sizeof t->type);
        h = fnv(h, &t->offset, sizeof t->offset);
        /* samples of the weights: 32 bytes at the start, the middle and the end */
        const uint8_t *d = t->data;
        const size_t n = (size_t)t->nbytes, k = n < 32 ? n : 32;
        if (d && n) {
            h = fnv(h, d, k);
            h = fnv(h, d + (n - k) / 2, k);
            h = fnv(h, d + n - k, k);
        }
    }
    return h;
}
