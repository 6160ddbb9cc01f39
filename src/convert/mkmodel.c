/* mkmodel.c - synthetic qwen35 / qwen35moe GGUF files and in-memory test models (see mkmodel.h). */
#include "convert/mkmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn_internal.h"

/* ---- presets (the shapes of the Hugging Face config.json of each Qwen3.5 size; tiny and tiny-moe are ours: Hk != Hv, GQA,
 * D != E/H; tiny-moe: 8 experts, top-2, expert width != shared width) --------------------- */

typedef struct preset {
    const char *name;
    uint32_t E, L, F, H, Hkv, D, Hk, Hv, d, interval, vocab;
    bool tied;
    uint32_t n_expert, k, F_exp, F_sh; /* n_expert > 0: qwen35moe (F = 0: no feed_forward_length) */
} preset;

static const preset presets[] = {
    /* name        E     L   F      H   Hkv D    Hk  Hv  d    int vocab tied   experts k  F_exp F_sh */
    {"tiny",       256,  6,  512,   4,  2,  128, 2,  4,  64,  3,  512,  false, 0,      0, 0,    0},
    {"0.8b",       1024, 24, 3584,  8,  2,  256, 16, 16, 128, 4,  4096, true,  0,      0, 0,    0},
    {"2b",         2048, 24, 6144,  8,  2,  256, 16, 16, 128, 4,  4096, true,  0,      0, 0,    0},
    {"4b",         2560, 32, 9216,  16, 4,  256, 16, 32, 128, 4,  4096, true,  0,      0, 0,    0},
    {"9b",         4096, 32, 12288, 16, 4,  256, 16, 32, 128, 4,  4096, false, 0,      0, 0,    0},
    {"tiny-moe",   256,  4,  0,     4,  2,  128, 2,  4,  64,  2,  512,  false, 8,      2, 256,  512},
    {"35b-a3b",    2048, 40, 0,     16, 2,  256, 16, 32, 128, 4,  4096, false, 256,    8, 512,  512},
    {"122b-a10b",  3072, 48, 0,     32, 2,  256, 16, 64, 128, 4,  4096, false, 256,    8, 1024, 1024},
};

#define N_SPECIAL NX_MK_N_SPECIAL
#define N_PRINT 95 /* space + printable ASCII 33..126 */
#define MAX_VOCAB (256u + N_SPECIAL + N_PRINT * N_PRINT + N_PRINT * N_PRINT * N_PRINT)

bool nx_mk_hparams(const nx_mk_options *o, nx_hparams *hp, bool *tied, nx_err *err) {
    const preset *p = NULL;
    for (size_t i = 0; i < NX_ARRAY_LEN(presets); i++)
        if (!strcmp(presets[i].name, o->preset)) p = &presets[i];
    if (!p)
        return nx_fail(err, "unknown preset '%s' (tiny, 0.8b, 2b, 4b, 9b; MoE: tiny-moe, 35b-a3b, 122b-a10b)",
                       o->preset);
    if (o->fuse_gate_up && !p->n_expert)
        return nx_fail(err, "preset '%s' is dense: fusing the expert gate/up tensors needs a MoE preset", o->preset);
    const uint32_t L = o->n_layers ? o->n_layers : p->L;
    if (L > p->L)
        return nx_fail(err, "layers %u out of range (1..%u, the preset's layer count)", L, p->L);
    memset(hp, 0, sizeof *hp);
    hp->moe = p->n_expert > 0;
    hp->n_expert = p->n_expert;
    hp->n_expert_used = p->k;
    hp->n_ff_exp = p->F_exp;
    hp->n_ff_shexp = p->F_sh;
    hp->n_ctx_train = 262144;
    hp->n_embd = p->E;
    hp->n_mtp = o->mtp ? 1 : 0;
    hp->n_layer_all = L + hp->n_mtp;
    hp->n_ff = p->F;
    hp->n_head = p->H;
    hp->n_head_kv = p->Hkv;
    hp->head_dim = p->D;
    hp->n_rot = p->D / 4; /* partial_rotary_factor 0.25 */
    hp->rope_sections[0] = 11; hp->rope_sections[1] = 11; hp->rope_sections[2] = 10; hp->rope_sections[3] = 0;
    hp->rope_base = 1e7f;
    hp->eps = 1e-6f;
    hp->ssm_conv_kernel = 4;
    hp->ssm_d_state = p->d;
    hp->ssm_n_group = p->Hk;
    hp->ssm_dt_rank = p->Hv;
    hp->ssm_d_inner = p->Hv * p->d;
    hp->full_attn_interval = p->interval;
    hp->n_vocab = o->n_vocab ? o->n_vocab : p->vocab;
    if (hp->n_vocab < 256 + N_SPECIAL || hp->n_vocab > MAX_VOCAB)
        return nx_fail(err, "n_vocab %u out of range (%d..%u)", hp->n_vocab, 256 + N_SPECIAL, MAX_VOCAB);
    for (uint32_t i = 0; i < hp->n_layer_all; i++)
        hp->recurrent[i] = i < L && (i + 1) % p->interval != 0;
    /* the loader refuses a trunk without attention: say so before anything is written */
    if (L < p->interval)
        return nx_fail(err, "n_layers %u: preset '%s' has a full-attention layer every %u layers and the trunk "
                       "needs one (n_layers >= %u)", L, o->preset, p->interval, p->interval);
    *tied = o->tie < 0 ? p->tied : o->tie != 0;
    return nx_hparams_finish(hp, o->preset, err);
}

static nx_mk_tensor *add(nx_mk_tensor *t, int *n, nx_mk_kind kind, uint64_t ne0, uint64_t ne1, const char *fmt,
                         int layer) {
    nx_mk_tensor *x = &t[(*n)++];
    memset(x, 0, sizeof *x);
    snprintf(x->name, sizeof x->name, fmt, layer);
    x->kind = kind;
    x->ne[0] = ne0;
    x->ne[1] = ne1;
    x->ne[2] = 1;
    x->n_dims = ne1 > 1 || kind == NX_MK_MATRIX || kind == NX_MK_CONV ? 2 : 1;
    x->keep_f32 = kind != NX_MK_MATRIX;
    return x;
}

/* A stacked expert tensor {ne0, ne1, n_expert}. */
static void add_experts(nx_mk_tensor *t, int *n, uint64_t ne0, uint64_t ne1, uint64_t n_expert, const char *fmt,
                        int layer) {
    nx_mk_tensor *x = add(t, n, NX_MK_MATRIX, ne0, ne1, fmt, layer);
    x->ne[2] = n_expert;
    x->n_dims = 3;
}

static void add_attn(nx_mk_tensor *t, int *n, const nx_hparams *hp, int l) {
    uint64_t E = hp->n_embd, HD = (uint64_t)hp->n_head * hp->head_dim, KV = nx_hp_kv_dim(hp);
    add(t, n, NX_MK_MATRIX, E, 2 * HD, "blk.%d.attn_q.weight", l);
    add(t, n, NX_MK_MATRIX, E, KV, "blk.%d.attn_k.weight", l);
    add(t, n, NX_MK_MATRIX, E, KV, "blk.%d.attn_v.weight", l);
    add(t, n, NX_MK_MATRIX, HD, E, "blk.%d.attn_output.weight", l);
    add(t, n, NX_MK_NORM, hp->head_dim, 1, "blk.%d.attn_q_norm.weight", l);
    add(t, n, NX_MK_NORM, hp->head_dim, 1, "blk.%d.attn_k_norm.weight", l);
}

/* Dense FFN, or the MoE FFN in the order llama.cpp's converter emits it (router, the stacked
 * experts down/gate/up as its merge loop writes them, shared expert, its gate).  The router and
 * the shared-expert gate stay F32 (the converter forces FFN_GATE_INP and FFN_GATE_INP_SHEXP to
 * F32); the shared-expert gate is 1-D {E}. */
static void add_ffn(nx_mk_tensor *t, int *n, const nx_hparams *hp, bool fuse_gate_up, int l) {
    uint64_t E = hp->n_embd, F = hp->n_ff;
    if (!hp->moe) {
        add(t, n, NX_MK_MATRIX, E, F, "blk.%d.ffn_gate.weight", l);
        add(t, n, NX_MK_MATRIX, E, F, "blk.%d.ffn_up.weight", l);
        add(t, n, NX_MK_MATRIX, F, E, "blk.%d.ffn_down.weight", l);
        return;
    }
    uint64_t N = hp->n_expert, Fe = hp->n_ff_exp, Fs = hp->n_ff_shexp;
    add(t, n, NX_MK_MATRIX, E, N, "blk.%d.ffn_gate_inp.weight", l)->keep_f32 = true;
    add_experts(t, n, Fe, E, N, "blk.%d.ffn_down_exps.weight", l);
    if (fuse_gate_up) {
        add_experts(t, n, E, 2 * Fe, N, "blk.%d.ffn_gate_up_exps.weight", l);
    } else {
        add_experts(t, n, E, Fe, N, "blk.%d.ffn_gate_exps.weight", l);
        add_experts(t, n, E, Fe, N, "blk.%d.ffn_up_exps.weight", l);
    }
    add(t, n, NX_MK_MATRIX, E, Fs, "blk.%d.ffn_gate_shexp.weight", l);
    add(t, n, NX_MK_MATRIX, E, Fs, "blk.%d.ffn_up_shexp.weight", l);
    add(t, n, NX_MK_MATRIX, Fs, E, "blk.%d.ffn_down_shexp.weight", l);
    nx_mk_tensor *g = add(t, n, NX_MK_MATRIX, E, 1, "blk.%d.ffn_gate_inp_shexp.weight", l);
    g->keep_f32 = true;
    g->n_dims = 1;
}

int nx_mk_tensors(const nx_hparams *hp, bool tied, bool fuse_gate_up, nx_mk_tensor **out, nx_err *err) {
    nx_mk_tensor *t = nx_calloc((size_t)hp->n_layer_all * 24 + 8, sizeof *t, "tensor list", err);
    if (!t) return -1;
    int n = 0;
    uint64_t E = hp->n_embd, V = hp->n_vocab;
    add(t, &n, NX_MK_MATRIX, E, V, "token_embd.weight", 0);
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        int li = (int)l;
        add(t, &n, NX_MK_NORM, E, 1, "blk.%d.attn_norm.weight", li);
        add(t, &n, NX_MK_NORM, E, 1, "blk.%d.post_attention_norm.weight", li);
        if (hp->recurrent[l]) {
            uint64_t C = nx_hp_conv_dim(hp), VD = nx_hp_value_dim(hp), Hv = hp->ssm_dt_rank;
            add(t, &n, NX_MK_MATRIX, E, C, "blk.%d.attn_qkv.weight", li);
            add(t, &n, NX_MK_MATRIX, E, VD, "blk.%d.attn_gate.weight", li);
            add(t, &n, NX_MK_MATRIX, E, Hv, "blk.%d.ssm_beta.weight", li);
            add(t, &n, NX_MK_MATRIX, E, Hv, "blk.%d.ssm_alpha.weight", li);
            add(t, &n, NX_MK_CONV, hp->ssm_conv_kernel, C, "blk.%d.ssm_conv1d.weight", li);
            add(t, &n, NX_MK_DT_BIAS, Hv, 1, "blk.%d.ssm_dt.bias", li);
            add(t, &n, NX_MK_SSM_A, Hv, 1, "blk.%d.ssm_a", li);
            add(t, &n, NX_MK_NORM, hp->ssm_d_state, 1, "blk.%d.ssm_norm.weight", li);
            add(t, &n, NX_MK_MATRIX, VD, E, "blk.%d.ssm_out.weight", li);
        } else {
            add_attn(t, &n, hp, li);
        }
        add_ffn(t, &n, hp, fuse_gate_up, li);
    }
    if (hp->n_mtp == 1) {
        int m = (int)hp->n_layer;
        add(t, &n, NX_MK_NORM, E, 1, "blk.%d.attn_norm.weight", m);
        add(t, &n, NX_MK_NORM, E, 1, "blk.%d.post_attention_norm.weight", m);
        add_attn(t, &n, hp, m);
        add_ffn(t, &n, hp, fuse_gate_up, m);
        add(t, &n, NX_MK_MATRIX, 2 * E, E, "blk.%d.nextn.eh_proj.weight", m);
        add(t, &n, NX_MK_NORM, E, 1, "blk.%d.nextn.enorm.weight", m);
        add(t, &n, NX_MK_NORM, E, 1, "blk.%d.nextn.hnorm.weight", m);
        add(t, &n, NX_MK_NORM, E, 1, "blk.%d.nextn.shared_head_norm.weight", m);
    }
    add(t, &n, NX_MK_NORM, E, 1, "output_norm.weight", 0);
    if (!tied) add(t, &n, NX_MK_MATRIX, E, V, "output.weight", 0);
    *out = t;
    return n;
}

/* ---- deterministic values --------------------------------------------------------------- */

static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t name_seed(const char *name, uint64_t seed) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const char *p = name; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ULL;
    return mix64(h ^ mix64(seed));
}

static float unif(uint64_t r) { return (float)((double)(r >> 11) * (1.0 / 9007199254740992.0)); }

/* ~N(0,1): sum of four 16-bit uniforms, centred and scaled to unit variance */
static float approx_normal(uint64_t r) {
    float s = (float)(r & 0xffff) + (float)((r >> 16) & 0xffff) + (float)((r >> 32) & 0xffff) + (float)(r >> 48);
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

void nx_mk_fill_rows(const nx_mk_tensor *t, const nx_hparams *hp, uint64_t seed, int64_t row0, int64_t nrows,
                     float *dst) {
    const uint64_t ts = name_seed(t->name, seed);
    const int64_t n0 = (int64_t)t->ne[0];
    for (int64_t r = 0; r < nrows; r++) {
        for (int64_t i = 0; i < n0; i++) {
            const uint64_t idx = (uint64_t)(row0 + r) * (uint64_t)n0 + (uint64_t)i;
            const uint64_t rnd = mix64(ts + idx * 0xd1b54a32d192ed03ULL);
            float v;
            switch (t->kind) {
            case NX_MK_MATRIX: v = 0.02f * approx_normal(rnd); break;
            case NX_MK_NORM: v = 1.0f + 0.2f * (unif(rnd) - 0.5f); break;
            case NX_MK_SSM_A: v = -expf(unif(rnd) * logf(16.0f)); break;
            case NX_MK_DT_BIAS: {
                float dt = expf(logf(1e-3f) + unif(rnd) * (logf(1e-1f) - logf(1e-3f)));
                v = dt + logf(-expm1f(-dt)); /* inverse softplus */
                break;
            }
            case NX_MK_CONV:
            default: v = (2.0f * unif(rnd) - 1.0f) / sqrtf((float)hp->ssm_conv_kernel); break;
            }
            dst[r * n0 + i] = v;
        }
    }
}

/* ---- in-memory models for tests ------------------------------------------------------------ */

bool nx_mk_memory_build(nx_mk_memory *mem, const nx_mk_options *o, nx_err *err) {
    memset(mem, 0, sizeof *mem);
    bool tied;
    if (!nx_mk_hparams(o, &mem->hp, &tied, err)) return false;
    mem->n = nx_mk_tensors(&mem->hp, tied, o->fuse_gate_up, &mem->tensors, err);
    if (mem->n < 0) return false;
    mem->data = nx_calloc((size_t)mem->n, sizeof *mem->data, "tensor data", err);
    mem->types = nx_calloc((size_t)mem->n, sizeof *mem->types, "tensor types", err);
    if (!mem->data || !mem->types) goto fail;
    for (int i = 0; i < mem->n; i++) {
        const nx_mk_tensor *t = &mem->tensors[i];
        const int64_t n0 = (int64_t)t->ne[0], n1 = nx_mk_rows(t);
        float *f = nx_malloc((size_t)(n0 * n1) * sizeof(float), t->name, err);
        if (!f) goto fail;
        nx_mk_fill_rows(t, &mem->hp, o->seed, 0, n1, f);
        uint32_t type = t->keep_f32 ? NX_TYPE_F32 : o->type;
        mem->types[i] = type;
        if (type == NX_TYPE_F32) {
            mem->data[i] = f;
            continue;
        }
        const nx_type_traits *tt = nx_type_get(type);
        size_t rb;
        if (!tt || !tt->from_float || !nx_row_size(type, n0, &rb, err)) {
            free(f);
            if (!tt || !tt->from_float) nx_fail(err, "type %s cannot be produced", nx_type_name(type));
            goto fail;
        }
        uint8_t *q = nx_malloc(rb * (size_t)n1, t->name, err);
        if (!q) { free(f); goto fail; }
        for (int64_t r = 0; r < n1; r++) tt->from_float(f + r * n0, q + (size_t)r * rb, n0);
        free(f);
        mem->data[i] = q;
    }
    return true;
fail:
    nx_mk_memory_free(mem);
    return false;
}

bool nx_mk_memory_lookup(void *user, const char *name, nx_tensor_info *out) {
    const nx_mk_memory *mem = user;
    for (int i = 0; i < mem->n; i++)
        if (!strcmp(mem->tensors[i].name, name)) {
            out->type = mem->types[i];
            out->n_dims = mem->tensors[i].n_dims;
            out->ne[0] = mem->tensors[i].ne[0];
            out->ne[1] = mem->tensors[i].ne[1];
            out->ne[2] = mem->tensors[i].ne[2];
            out->ne[3] = 1;
            out->data = mem->data[i];
            return true;
        }
    return false;
}

void nx_mk_memory_free(nx_mk_memory *mem) {
    if (mem->data)
        for (int i = 0; i < mem->n; i++) free(mem->data[i]);
    free(mem->data);
    free(mem->types);
    free(mem->tensors);
    memset(mem, 0, sizeof *mem);
}

