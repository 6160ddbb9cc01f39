/* convert.c - HF Qwen3.5 / Qwen3.5-MoE checkpoint -> GGUF (see convert.h for the transformations).
 *
 * Flow: read config.json into cv_hp; open the safetensors; load the vocabulary (hf_tokenizer);
 * walk the tensors in checkpoint order, mapping each HF name to its GGUF name and a "recipe"
 * (value op, V-head permutation, output type, sources) while checking its shape against the
 * config; per-expert tensors are collected per layer and become the stacked 3-D tensors at the
 * position of the layer's last expert tensor (where llama.cpp emits them); check that every
 * tensor the model needs is there; then hand the keys and the tensor list to the GGUF writer,
 * whose fill callback produces each tensor (3-D tensors one expert at a time) from the mmapped
 * sources row by row.
 */
#include "convert/convert.h"
#include "convert/convert_kernels.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nextn_internal.h"
#include "convert/hf_tokenizer.h"
#include "convert/llama_ftype.h"
#include "convert/safetensors.h"

#define CV_MAX_NAME 96

/* ---- hyper-parameters from config.json ----------------------------------------------------- */

typedef struct cv_hp {
    uint32_t L, E, F, H, Hkv, D, R, Hk, Hv, dk, dv, Kc, interval, n_mtp, n_ctx;
    uint32_t n_expert, n_used, Fe, Fsh;   /* MoE: experts, experts per token, expert / shared FFN widths */
    bool moe, has_F, has_Hkv, has_ctx, has_theta, has_sections, tied;
    const char *arch;                     /* GGUF architecture: "qwen35" or "qwen35moe" */
    float eps, theta;
    int32_t sections[4];
} cv_hp;


/* Lookup in the merged config: text_config's value wins over the top level (llama.cpp does
 * `{**config, **config["text_config"]}`). */
static const cJSON *cfg_item(const cJSON *root, const cJSON *text, const char *key) {
    const cJSON *v = text ? cJSON_GetObjectItemCaseSensitive(text, key) : NULL;
    return v ? v : cJSON_GetObjectItemCaseSensitive(root, key);
}

static bool cfg_u32(const cJSON *root, const cJSON *text, const char *path, const char *key, bool required,
                    uint32_t *out, bool *present, nx_err *err) {
    const cJSON *v = cfg_item(root, text, key);
    if (present) *present = false;
    if (!v || cJSON_IsNull(v)) {
        if (required) return nx_fail(err, "%s: missing required key '%s'", path, key);
        return true;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 4294967295.0 ||
        floor(v->valuedouble) != v->valuedouble)
        return nx_fail(err, "%s: '%s' must be a non-negative integer below 2^32", path, key);
    *out = (uint32_t)v->valuedouble;
    if (present) *present = true;
    return true;
}

static char *read_small_file(const char *path, nx_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { nx_fail(err, "%s: cannot open", path); return NULL; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (64L << 20)) { fclose(f); nx_fail(err, "%s: unreadable or larger than 64 MiB", path); return NULL; }
    char *buf = nx_malloc((size_t)n + 1, path, err);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; nx_fail(err, "%s: read error", path); }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* First key of `keys` present in the merged config (llama.cpp's find_hparam order). */
static bool cfg_u32_any(const cJSON *root, const cJSON *text, const char *path, const char *const *keys, size_t n,
                        uint32_t *out, bool *present, const char **which, nx_err *err) {
    *present = false;
    for (size_t i = 0; i < n; i++) {
        const cJSON *v = cfg_item(root, text, keys[i]);
        if (!v || cJSON_IsNull(v)) continue;
        if (which) *which = keys[i];
        return cfg_u32(root, text, path, keys[i], true, out, present, err);
    }
    return true;
}

/* The MoE block of Qwen3.5-MoE: every layer (and the MTP block) routes each token to the top
 * num_experts_per_tok of num_experts experts (softmax over all, top-k, renormalised) and adds a
 * sigmoid-gated shared expert.  Settings that describe another routing are refused rather than
 * converted into a file that computes something else. */
static bool load_moe_hparams(const cJSON *root, const cJSON *tc, const char *cfg_path, cv_hp *hp, nx_err *err) {
    static const char *const k_expert[] = {"num_local_experts", "num_experts", "n_routed_experts"};
    static const char *const k_used[] = {"num_experts_per_tok", "num_experts_per_token", "top_k_experts"};
    bool have = false, ok = true;
    ok = ok && cfg_u32_any(root, tc, cfg_path, k_expert, NX_ARRAY_LEN(k_expert), &hp->n_expert, &have, NULL, err);
    if (ok && !have) ok = nx_fail(err, "%s: missing required key 'num_experts'", cfg_path);
    ok = ok && cfg_u32_any(root, tc, cfg_path, k_used, NX_ARRAY_LEN(k_used), &hp->n_used, &have, NULL, err);
    if (ok && !have) ok = nx_fail(err, "%s: missing required key 'num_experts_per_tok'", cfg_path);
    ok = ok && cfg_u32(root, tc, cfg_path, "moe_intermediate_size", true, &hp->Fe, NULL, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "shared_expert_intermediate_size", true, &hp->Fsh, NULL, err);
    if (ok && (hp->n_expert == 0 || hp->n_expert > 65536))
        ok = nx_fail(err, "%s: num_experts %u is not in 1..65536", cfg_path, hp->n_expert);
    if (ok && (hp->n_used == 0 || hp->n_used > hp->n_expert))
        ok = nx_fail(err, "%s: num_experts_per_tok %u is not in 1..num_experts (%u)", cfg_path, hp->n_used, hp->n_expert);
    if (ok && (hp->Fe == 0 || hp->Fsh == 0))
        ok = nx_fail(err, "%s: moe_intermediate_size and shared_expert_intermediate_size must be positive", cfg_path);
    const cJSON *v = cfg_item(root, tc, "norm_topk_prob");
    if (ok && cJSON_IsFalse(v))
        ok = nx_fail(err, "%s: norm_topk_prob false is not supported (qwen35moe renormalises the top-k weights)",
                     cfg_path);
    v = cfg_item(root, tc, "decoder_sparse_step");
    if (ok && v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 1.0))
        ok = nx_fail(err, "%s: decoder_sparse_step must be 1 (qwen35moe has an MoE block in every layer)", cfg_path);
    v = cfg_item(root, tc, "mlp_only_layers");
    if (ok && v && !cJSON_IsNull(v) && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
        ok = nx_fail(err, "%s: mlp_only_layers must be empty (qwen35moe has an MoE block in every layer)", cfg_path);
    static const char *const k_score[] = {"score_function", "scoring_func", "score_func", "moe_router_activation",
                                          "moe_router_activation_func", "expert_selection_fn", "n_group", "topk_group"};
    for (size_t i = 0; ok && i < NX_ARRAY_LEN(k_score); i++) {
        v = cfg_item(root, tc, k_score[i]);
        if (v && !cJSON_IsNull(v))
            ok = nx_fail(err, "%s: '%s' is not supported (qwen35moe routes by softmax over all experts)", cfg_path,
                         k_score[i]);
    }
    return ok;
}

static bool load_hparams(const char *cfg_path, cv_hp *hp, nx_err *err) {
    memset(hp, 0, sizeof *hp);
    char *text = read_small_file(cfg_path, err);
    if (!text) return false;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return nx_fail(err, "%s: not a valid JSON object", cfg_path);
    }
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (tc && !cJSON_IsObject(tc)) tc = NULL;
    bool ok = true;
    /* Architecture: Qwen3.5 dense (GGUF qwen35) or MoE (qwen35moe). */
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(root, "architectures");
    const char *arch = cJSON_IsArray(archs) && cJSON_IsString(cJSON_GetArrayItem(archs, 0))
                           ? cJSON_GetArrayItem(archs, 0)->valuestring : NULL;
    hp->arch = "qwen35";
    if (!arch) {
        ok = nx_fail(err, "%s: missing 'architectures'", cfg_path);
    } else if (!strcmp(arch, "Qwen3_5MoeForCausalLM") || !strcmp(arch, "Qwen3_5MoeForConditionalGeneration")) {
        hp->moe = true;
        hp->arch = "qwen35moe";
    } else if (strcmp(arch, "Qwen3_5ForCausalLM") && strcmp(arch, "Qwen3_5ForConditionalGeneration")) {
        ok = nx_fail(err, "%s: architecture '%s' is not supported (Qwen3_5ForCausalLM, "
                     "Qwen3_5ForConditionalGeneration, Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration)",
                     cfg_path, arch);
    }
    bool has_hd = false, has_vocab = false, has_mtp = false;
    uint32_t vocab = 0;
    ok = ok && cfg_u32(root, tc, cfg_path, "num_hidden_layers", true, &hp->L, NULL, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "hidden_size", true, &hp->E, NULL, err);
    /* MoE configs have no dense FFN width (written only when present, as llama.cpp does) */
    ok = ok && cfg_u32(root, tc, cfg_path, "intermediate_size", !hp->moe, &hp->F, &hp->has_F, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "num_attention_heads", true, &hp->H, NULL, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "num_key_value_heads", false, &hp->Hkv, &hp->has_Hkv, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "head_dim", false, &hp->D, &has_hd, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "linear_conv_kernel_dim", true, &hp->Kc, NULL, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "linear_key_head_dim", true, &hp->dk, NULL, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "linear_value_head_dim", true, &hp->dv, NULL, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "linear_num_key_heads", true, &hp->Hk, NULL, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "linear_num_value_heads", true, &hp->Hv, NULL, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "max_position_embeddings", false, &hp->n_ctx, &hp->has_ctx, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "vocab_size", false, &vocab, &has_vocab, err);
    ok = ok && cfg_u32(root, tc, cfg_path, "mtp_num_hidden_layers", false, &hp->n_mtp, &has_mtp, err);
    hp->interval = 4;
    ok = ok && cfg_u32(root, tc, cfg_path, "full_attention_interval", false, &hp->interval, NULL, err);
    if (ok) {
        const cJSON *eps = cfg_item(root, tc, "rms_norm_eps");
        if (!cJSON_IsNumber(eps)) ok = nx_fail(err, "%s: missing required number 'rms_norm_eps'", cfg_path);
        else hp->eps = (float)eps->valuedouble;
    }
    if (ok && hp->moe) ok = load_moe_hparams(root, tc, cfg_path, hp, err);
    if (ok && (hp->E == 0 || hp->H == 0 || hp->L == 0 || hp->Hk == 0 || hp->Hv == 0 || hp->dk == 0 || hp->Kc == 0 ||
               hp->interval == 0))
        ok = nx_fail(err, "%s: hidden_size, num_attention_heads, num_hidden_layers, linear_* sizes and "
                     "full_attention_interval must be positive", cfg_path);
    if (ok && !has_hd) {
        if (hp->E % hp->H) ok = nx_fail(err, "%s: no head_dim and hidden_size %% num_attention_heads != 0", cfg_path);
        hp->D = hp->H ? hp->E / hp->H : 0;
    }
    if (ok && !hp->has_Hkv) hp->Hkv = hp->H;
    if (ok && (hp->Hkv == 0 || hp->H % hp->Hkv))
        ok = nx_fail(err, "%s: num_attention_heads %u is not a multiple of num_key_value_heads %u", cfg_path, hp->H, hp->Hkv);
    if (ok && hp->Hv % hp->Hk)
        ok = nx_fail(err, "%s: linear_num_value_heads %u is not a multiple of linear_num_key_heads %u", cfg_path,
                     hp->Hv, hp->Hk);
    if (ok && hp->dk != hp->dv)
        ok = nx_fail(err, "%s: linear_key_head_dim %u != linear_value_head_dim %u (llama.cpp's qwen35 needs them equal)",
                     cfg_path, hp->dk, hp->dv);
    /* rope: rope_parameters (or rope_scaling), with top-level rope_theta / partial_rotary_factor
     * mirrored in when absent - as llama.cpp's TextModel does. */
    const cJSON *rp = cfg_item(root, tc, "rope_parameters");
    if (!cJSON_IsObject(rp)) rp = cfg_item(root, tc, "rope_scaling");
    if (!cJSON_IsObject(rp)) rp = NULL;
    const cJSON *theta = rp ? cJSON_GetObjectItemCaseSensitive(rp, "rope_theta") : NULL;
    if (!theta) theta = cfg_item(root, tc, "rope_theta");
    if (cJSON_IsNumber(theta)) { hp->has_theta = true; hp->theta = (float)theta->valuedouble; }
    const cJSON *prf = rp ? cJSON_GetObjectItemCaseSensitive(rp, "partial_rotary_factor") : NULL;
    if (!prf) prf = cfg_item(root, tc, "partial_rotary_factor");
    double factor = cJSON_IsNumber(prf) ? prf->valuedouble : 0.25;
    hp->R = (uint32_t)(hp->D * factor);           /* python int() truncates */
    const cJSON *sec = rp ? cJSON_GetObjectItemCaseSensitive(rp, "mrope_section") : NULL;
    if (ok && sec) {
        int n = cJSON_GetArraySize(sec);
        if (!cJSON_IsArray(sec) || n > 4) {
            ok = nx_fail(err, "%s: rope mrope_section must be an array of at most 4 integers", cfg_path);
        } else {
            hp->has_sections = true;
            for (int i = 0; i < 4; i++) {
                const cJSON *e = i < n ? cJSON_GetArrayItem(sec, i) : NULL;
                if (e && !cJSON_IsNumber(e)) { ok = nx_fail(err, "%s: mrope_section[%d] is not a number", cfg_path, i); break; }
                hp->sections[i] = e ? (int32_t)e->valuedouble : 0;
            }
        }
    }
    const cJSON *tie = cfg_item(root, tc, "tie_word_embeddings");
    hp->tied = cJSON_IsTrue(tie);
    /* layer_types, when given, must agree with the interval rule llama.cpp's qwen35 applies. */
    const cJSON *lt = cfg_item(root, tc, "layer_types");
    if (ok && cJSON_IsArray(lt)) {
        if ((uint32_t)cJSON_GetArraySize(lt) != hp->L)
            ok = nx_fail(err, "%s: layer_types has %d entries, num_hidden_layers is %u", cfg_path,
                         cJSON_GetArraySize(lt), hp->L);
        for (uint32_t i = 0; ok && i < hp->L; i++) {
            const cJSON *e = cJSON_GetArrayItem(lt, (int)i);
            bool attn = (i + 1) % hp->interval == 0;
            if (!cJSON_IsString(e) || strcmp(e->valuestring, attn ? "full_attention" : "linear_attention"))
                ok = nx_fail(err, "%s: layer_types[%u] disagrees with full_attention_interval %u (llama.cpp's qwen35 "
                             "uses the interval rule: layer i is full attention iff (i+1) %% %u == 0)",
                             cfg_path, i, hp->interval, hp->interval);
        }
    }
    (void)vocab;
    cJSON_Delete(root);
    return ok;
}

/* ---- tensor recipes -------------------------------------------------------------------- */

typedef enum { OP_NONE, OP_PLUS_ONE, OP_NEG_EXP } cv_op;

/* Expected HF shapes, in terms of the config. */
typedef enum {
    S_E, S_D, S_DV, S_HV, S_VE, S_QG, S_KV, S_O, S_QKV, S_Z, S_HVE, S_CONV, S_OUTP, S_FE, S_EF, S_EH,
    S_XE,      /* router [n_expert, E] */
    S_SE, S_ES, /* shared expert [Fsh, E], [E, Fsh] */
    S_1E,      /* shared expert gate [1, E] */
    S_XFE, S_XEF, /* one expert: [Fe, E] (gate/up), [E, Fe] (down) */
    S_X2FE, S_XEF3 /* fused experts: [n_expert, 2 Fe, E] (gate_up), [n_expert, E, Fe] (down) */
} cv_shape;

/* Where a rule applies: any layer, attention / GDN layers, the MTP block's first layer; dense or
 * MoE FFN (any layer of a dense / MoE model). */
typedef enum { K_ANY, K_ATTN, K_GDN, K_NEXTN, K_DENSE, K_MOE } cv_kind;
typedef enum { P_NONE, P_ROWS_V, P_ROWS_ALL, P_COLS } cv_perm;

typedef struct cv_rule {
    const char *hf;        /* suffix after "model.layers.N." */
    const char *gguf;      /* suffix after "blk.N." */
    cv_kind kind;
    cv_shape shape;
    cv_op op;
    cv_perm perm;
    uint32_t head_rows;    /* 0 = dv, else this many rows/columns per value head */
} cv_rule;

static const cv_rule layer_rules[] = {
    {"input_layernorm.weight",          "attn_norm.weight",           K_ANY,   S_E,    OP_PLUS_ONE, P_NONE, 0},
    {"post_attention_layernorm.weight", "post_attention_norm.weight", K_ANY,   S_E,    OP_PLUS_ONE, P_NONE, 0},
    {"mlp.gate_proj.weight",            "ffn_gate.weight",            K_DENSE, S_FE,   OP_NONE,     P_NONE, 0},
    {"mlp.up_proj.weight",              "ffn_up.weight",              K_DENSE, S_FE,   OP_NONE,     P_NONE, 0},
    {"mlp.down_proj.weight",            "ffn_down.weight",            K_DENSE, S_EF,   OP_NONE,     P_NONE, 0},
    {"mlp.gate.weight",                 "ffn_gate_inp.weight",        K_MOE,   S_XE,   OP_NONE,     P_NONE, 0},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight",   K_MOE,   S_SE,   OP_NONE,     P_NONE, 0},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight",       K_MOE,   S_SE,   OP_NONE,     P_NONE, 0},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight",   K_MOE,   S_ES,   OP_NONE,     P_NONE, 0},
    {"mlp.shared_expert_gate.weight",   "ffn_gate_inp_shexp.weight",  K_MOE,   S_1E,   OP_NONE,     P_NONE, 0},
    /* the routed experts: stacked from mlp.experts.N.*_proj or split from mlp.experts.gate_up_proj
     * (map_expert); listed here for the completeness check only */
    {NULL,                              "ffn_gate_exps.weight",       K_MOE,   S_XFE,  OP_NONE,     P_NONE, 0},
    {NULL,                              "ffn_up_exps.weight",         K_MOE,   S_XFE,  OP_NONE,     P_NONE, 0},
    {NULL,                              "ffn_down_exps.weight",       K_MOE,   S_XEF,  OP_NONE,     P_NONE, 0},
    {"self_attn.q_proj.weight",         "attn_q.weight",              K_ATTN,  S_QG,   OP_NONE,     P_NONE, 0},
    {"self_attn.k_proj.weight",         "attn_k.weight",              K_ATTN,  S_KV,   OP_NONE,     P_NONE, 0},
    {"self_attn.v_proj.weight",         "attn_v.weight",              K_ATTN,  S_KV,   OP_NONE,     P_NONE, 0},
    {"self_attn.o_proj.weight",         "attn_output.weight",         K_ATTN,  S_O,    OP_NONE,     P_NONE, 0},
    {"self_attn.q_norm.weight",         "attn_q_norm.weight",         K_ATTN,  S_D,    OP_PLUS_ONE, P_NONE, 0},
    {"self_attn.k_norm.weight",         "attn_k_norm.weight",         K_ATTN,  S_D,    OP_PLUS_ONE, P_NONE, 0},
    {"linear_attn.in_proj_qkv.weight",  "attn_qkv.weight",            K_GDN,   S_QKV,  OP_NONE,     P_ROWS_V, 0},
    {"linear_attn.in_proj_z.weight",    "attn_gate.weight",           K_GDN,   S_Z,    OP_NONE,     P_ROWS_ALL, 0},
    {"linear_attn.in_proj_b.weight",    "ssm_beta.weight",            K_GDN,   S_HVE,  OP_NONE,     P_ROWS_ALL, 1},
    {"linear_attn.in_proj_a.weight",    "ssm_alpha.weight",           K_GDN,   S_HVE,  OP_NONE,     P_ROWS_ALL, 1},
    {"linear_attn.conv1d.weight",       "ssm_conv1d.weight",          K_GDN,   S_CONV, OP_NONE,     P_ROWS_V, 0},
    {"linear_attn.dt_bias",             "ssm_dt.bias",                K_GDN,   S_HV,   OP_NONE,     P_COLS, 1},
    {"linear_attn.A_log",               "ssm_a",                      K_GDN,   S_HV,   OP_NEG_EXP,  P_COLS, 1},
    {"linear_attn.norm.weight",         "ssm_norm.weight",            K_GDN,   S_DV,   OP_NONE,     P_NONE, 0},
    {"linear_attn.out_proj.weight",     "ssm_out.weight",             K_GDN,   S_OUTP, OP_NONE,     P_COLS, 0},
    {"eh_proj.weight",                  "nextn.eh_proj.weight",       K_NEXTN, S_EH,   OP_NONE,     P_NONE, 0},
    {"enorm.weight",                    "nextn.enorm.weight",         K_NEXTN, S_E,    OP_PLUS_ONE, P_NONE, 0},
    {"hnorm.weight",                    "nextn.hnorm.weight",         K_NEXTN, S_E,    OP_PLUS_ONE, P_NONE, 0},
    {"shared_head.norm.weight",         "nextn.shared_head_norm.weight", K_NEXTN, S_E, OP_PLUS_ONE, P_NONE, 0},
};
#define N_RULES (sizeof layer_rules / sizeof layer_rules[0])

typedef struct cv_job cv_job;

typedef struct cv_tensor {
    cv_job *job;
    const nx_st_tensor *src;    /* the source (the first expert's for stacked tensors) */
    /* 3-D expert tensors are produced one expert ("part") at a time: part p is output rows
     * [p * part_rows, (p + 1) * part_rows).  Its source rows come from srcs[p] (stacked
     * per-expert tensors; with srcs2, rows from half on come from srcs2[p]: gate and up fused),
     * or from rows p * slab_rows + slab_off + ... of src (a half of a fused gate_up source). */
    const nx_st_tensor *const *srcs, *const *srcs2;
    uint64_t slab_rows, slab_off, half;
    uint64_t part_rows, n_parts;
    char name[CV_MAX_NAME];     /* GGUF name */
    char hf[CV_MAX_NAME * 2];   /* HF name after prefix stripping / MTP remapping (messages) */
    uint32_t type;              /* output ggml type */
    uint32_t n_dims;
    uint64_t ne[NX_GGUF_MAX_DIMS];
    uint64_t rows, cols;        /* cols = ne[0] */
    cv_op op;
    bool round_f16;             /* F16 source: the op's result is rounded to F16 (llama.cpp does it in F16) */
    cv_perm perm;
    uint64_t perm_first, perm_hd; /* permuted range starts at row (or column) perm_first; hd per head */
} cv_tensor;

struct cv_job {
    const cv_hp *hp;
    cv_tensor *t;
    size_t n_t;
    float *scratch;             /* 2 x max cols */
    uint64_t done, total;
    const nx_convert_opts *opts;
    nx_cv_f16_to_f32_fn f16_to_f32;   /* chosen once per run (SIMD when available) */
    nx_cv_q8_0_fn q8_0;
    const nx_safetensors *st;
};

/* Output head index -> source head index: tiled order (new j*Hk + g) from grouped (old g*r + j). */
static uint64_t perm_src(const cv_hp *hp, uint64_t i, uint64_t first, uint64_t hd) {
    if (i < first) return i;
    uint64_t rel = i - first, head = rel / hd, off = rel % hd;
    uint64_t r = hp->Hv / hp->Hk;
    if (head >= hp->Hv) return i;
    uint64_t src_head = (head % hp->Hk) * r + head / hp->Hk;
    return first + src_head * hd + off;
}

static void report(cv_job *job, const cv_tensor *t) {
    if (!job->opts->progress) return;
    nx_progress p = {(uint64_t)(t - job->t) + 1, job->n_t, job->done, job->total, t->name, NULL};
    job->opts->progress(job->opts->progress_user, &p);
}

static bool encode_row(const cv_job *job, uint32_t type, const float *x, void *dst, uint64_t n) {
    switch (type) {
    case NX_TYPE_Q8_0: job->q8_0(x, dst, n); return true;
    case NX_TYPE_F32: memcpy(dst, x, n * 4); return true;
    case NX_TYPE_F16: { uint16_t *d = dst; for (uint64_t i = 0; i < n; i++) d[i] = nx_f32_to_f16(x[i]); return true; }
    case NX_TYPE_BF16: { uint16_t *d = dst; for (uint64_t i = 0; i < n; i++) d[i] = nx_f32_to_bf16(x[i]); return true; }
    default: {
        const nx_type_traits *tr = nx_type_get(type);
        if (!tr || !tr->from_float) return false;
        tr->from_float(x, dst, (int64_t)n);
        return true;
    }
    }
}

/* Converts output rows [r0, r1) of t, which all come from source s starting at source row sr0
 * (consecutive), into dst.  V-head permutations (2-D tensors, one part) remap the source row. */
static bool fill_run(cv_tensor *t, const nx_st_tensor *s, uint64_t sr0, uint64_t r0, uint64_t r1, uint8_t *dst,
                     size_t row_bytes, nx_err *err) {
    cv_job *job = t->job;
    const uint64_t src_row_bytes = t->cols * nx_st_dtype_size(s->dtype);
    const uint64_t n = r1 - r0, off = sr0 * src_row_bytes, len = n * src_row_bytes;
    nx_st_prefetch_range(job->st, s, off, len);
    bool same = (s->dtype == NX_ST_F32 && t->type == NX_TYPE_F32) || (s->dtype == NX_ST_F16 && t->type == NX_TYPE_F16) ||
                (s->dtype == NX_ST_BF16 && t->type == NX_TYPE_BF16);
    if (same && t->op == OP_NONE && t->perm == P_NONE) {
        /* Byte copy, in slices so the progress bar moves on big tensors. */
        const uint8_t *src = (const uint8_t *)s->data + off;
        const uint64_t slice = 16u << 20;
        for (uint64_t o = 0; o < len; o += slice) {
            uint64_t k = len - o < slice ? len - o : slice;
            memcpy(dst + o, src + o, k);
            job->done += k;
            report(job, t);
        }
        nx_st_release_range(job->st, s, off, len);
        return true;
    }
    float *row = job->scratch, *tmp = job->scratch + t->cols;
    uint64_t since = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t sr = sr0 + i;
        if (t->perm == P_ROWS_V || t->perm == P_ROWS_ALL) sr = perm_src(job->hp, r0 + i, t->perm_first, t->perm_hd);
        if (s->dtype == NX_ST_F16) /* (shape checked at open: sr * cols + cols <= n_elems) */
            job->f16_to_f32((const uint8_t *)s->data + sr * src_row_bytes, row, t->cols);
        else if (!nx_st_read_f32(s, sr * t->cols, t->cols, row, err))
            return nx_fail_prefix(err, "%s", t->name);
        if (t->perm == P_COLS) {
            for (uint64_t c = 0; c < t->cols; c++) tmp[c] = row[perm_src(job->hp, c, t->perm_first, t->perm_hd)];
            memcpy(row, tmp, t->cols * sizeof *row);
        }
        if (t->op != OP_NONE) {
            for (uint64_t c = 0; c < t->cols; c++) {
                float v = t->op == OP_PLUS_ONE ? row[c] + 1.0f : -expf(row[c]);
                row[c] = t->round_f16 ? nx_f16_to_f32(nx_f32_to_f16(v)) : v;
            }
        }
        if (!encode_row(job, t->type, row, dst + i * row_bytes, t->cols))
            return nx_fail(err, "%s: cannot encode type %s", t->name, nx_type_name(t->type));
        job->done += src_row_bytes;
        since += src_row_bytes;
        if (since >= (4u << 20) || i + 1 == n) { report(job, t); since = 0; }
    }
    nx_st_release_range(job->st, s, off, len);
    return true;
}

/* GGUF writer fill callback: produces part p (one expert of a 3-D tensor, or the whole tensor). */
static bool fill_part(void *user, uint64_t p, void *dst, uint64_t nbytes, nx_err *err) {
    cv_tensor *t = user;
    size_t row_bytes;
    if (!nx_row_size(t->type, (int64_t)t->cols, &row_bytes, err)) return nx_fail_prefix(err, "%s", t->name);
    if ((uint64_t)row_bytes * t->part_rows != nbytes)
        return nx_fail(err, "%s: writer asks for %llu bytes, expected %llu", t->name, (unsigned long long)nbytes,
                       (unsigned long long)((uint64_t)row_bytes * t->part_rows));
    const uint64_t r0 = p * t->part_rows;
    uint8_t *d = dst;
    if (t->srcs && t->srcs2)
        return fill_run(t, t->srcs[p], 0, r0, r0 + t->half, d, row_bytes, err) &&
               fill_run(t, t->srcs2[p], 0, r0 + t->half, r0 + t->part_rows, d + t->half * row_bytes, row_bytes, err);
    if (t->srcs) return fill_run(t, t->srcs[p], 0, r0, r0 + t->part_rows, d, row_bytes, err);
    if (t->slab_rows)
        return fill_run(t, t->src, p * t->slab_rows + t->slab_off, r0, r0 + t->part_rows, d, row_bytes, err);
    return fill_run(t, t->src, r0, r0, r0 + t->part_rows, d, row_bytes, err);
}

/* ---- mapping ----------------------------------------------------------------------------- */

static bool is_attn_layer(const cv_hp *hp, uint32_t n) {
    return n >= hp->L || (n + 1) % hp->interval == 0;  /* MTP blocks are full attention */
}

/* Expected PyTorch shape for a rule; returns n_dims. */
static uint32_t expected_shape(const cv_hp *hp, cv_shape s, uint32_t n_vocab, uint64_t *out) {
    const uint64_t key_dim = (uint64_t)hp->Hk * hp->dk, value_dim = (uint64_t)hp->Hv * hp->dv;
    switch (s) {
    case S_E: out[0] = hp->E; return 1;
    case S_D: out[0] = hp->D; return 1;
    case S_DV: out[0] = hp->dv; return 1;
    case S_HV: out[0] = hp->Hv; return 1;
    case S_VE: out[0] = n_vocab; out[1] = hp->E; return 2;
    case S_QG: out[0] = 2ull * hp->H * hp->D; out[1] = hp->E; return 2;
    case S_KV: out[0] = (uint64_t)hp->Hkv * hp->D; out[1] = hp->E; return 2;
    case S_O: out[0] = hp->E; out[1] = (uint64_t)hp->H * hp->D; return 2;
    case S_QKV: out[0] = 2 * key_dim + value_dim; out[1] = hp->E; return 2;
    case S_Z: out[0] = value_dim; out[1] = hp->E; return 2;
    case S_HVE: out[0] = hp->Hv; out[1] = hp->E; return 2;
    case S_CONV: out[0] = 2 * key_dim + value_dim; out[1] = 1; out[2] = hp->Kc; return 3;
    case S_OUTP: out[0] = hp->E; out[1] = value_dim; return 2;
    case S_FE: out[0] = hp->F; out[1] = hp->E; return 2;
    case S_EF: out[0] = hp->E; out[1] = hp->F; return 2;
    case S_EH: out[0] = hp->E; out[1] = 2ull * hp->E; return 2;
    case S_XE: out[0] = hp->n_expert; out[1] = hp->E; return 2;
    case S_SE: out[0] = hp->Fsh; out[1] = hp->E; return 2;
    case S_ES: out[0] = hp->E; out[1] = hp->Fsh; return 2;
    case S_1E: out[0] = 1; out[1] = hp->E; return 2;
    case S_XFE: out[0] = hp->Fe; out[1] = hp->E; return 2;
    case S_XEF: out[0] = hp->E; out[1] = hp->Fe; return 2;
    case S_X2FE: out[0] = hp->n_expert; out[1] = 2ull * hp->Fe; out[2] = hp->E; return 3;
    case S_XEF3: out[0] = hp->n_expert; out[1] = hp->E; out[2] = hp->Fe; return 3;
    }
    return 0;
}

static void fmt_shape(char *buf, size_t cap, uint32_t nd, const uint64_t *s) {
    size_t k = (size_t)snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < nd && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%llu", i ? ", " : "", (unsigned long long)s[i]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
}

static bool check_shape(const nx_st_tensor *src, const char *hf, uint32_t nd, const uint64_t *want, nx_err *err) {
    bool ok = src->n_dims == nd;
    for (uint32_t i = 0; ok && i < nd; i++) ok = src->shape[i] == want[i];
    if (ok) return true;
    char a[128], b[128];
    fmt_shape(a, sizeof a, src->n_dims, src->shape);
    fmt_shape(b, sizeof b, nd, want);
    return nx_fail(err, "tensor '%s' has shape %s but config.json implies %s", hf, a, b);
}

/* Normalises an HF name like llama.cpp's filters.  Returns false with *keep = false to skip. */
static bool normalise_name(const char *in, const cv_hp *hp, nx_convert_mtp mtp, char *out, size_t cap, bool *keep,
                           nx_err *err) {
    *keep = false;
    /* multimodal towers and buffers llama.cpp drops */
    if (!strncmp(in, "mlp", 3) || strstr(in, "visual.") || strstr(in, "vision") || strstr(in, "audio") ||
        strstr(in, "merger.") || strstr(in, "projector.") || strstr(in, "patch_embed"))
        return true;
    /* remove every "language_model." (model.language_model.X -> model.X) */
    char buf[512];
    size_t k = 0;
    for (const char *p = in; *p && k + 1 < sizeof buf;) {
        if (!strncmp(p, "language_model.", 15)) { p += 15; continue; }
        buf[k++] = *p++;
    }
    buf[k] = 0;
    const char *n = buf;
    if (!strncmp(n, "model.mtp.", 10)) n += 6;
    static const char *const drop_suffix[] = {".rotary_emb.inv_freq", ".attention.masked_bias", ".attention.bias"};
    for (size_t i = 0; i < NX_ARRAY_LEN(drop_suffix); i++) {
        size_t ls = strlen(drop_suffix[i]), ln = strlen(n);
        if (ln >= ls && !strcmp(n + ln - ls, drop_suffix[i])) return true;
    }
    if (!strncmp(n, "mtp.", 4)) {
        if (mtp == NX_CONVERT_MTP_DROP) return true;
        const char *rest = n + 4;
        unsigned idx;
        int used = 0;
        static const char *const glue[][2] = {{"fc.", "eh_proj."}, {"pre_fc_norm_embedding.", "enorm."},
                                              {"pre_fc_norm_hidden.", "hnorm."}, {"norm.", "shared_head.norm."}};
        if (sscanf(rest, "layers.%u.%n", &idx, &used) == 1 && used > 0) {
            snprintf(out, cap, "model.layers.%u.%s", hp->L + idx, rest + used);
            *keep = true;
            return true;
        }
        for (size_t i = 0; i < NX_ARRAY_LEN(glue); i++) {
            size_t lg = strlen(glue[i][0]);
            if (!strncmp(rest, glue[i][0], lg)) {
                snprintf(out, cap, "model.layers.%u.%s%s", hp->L, glue[i][1], rest + lg);
                *keep = true;
                return true;
            }
        }
        return nx_fail(err, "cannot map MTP tensor '%s'", in);
    }
    if (mtp == NX_CONVERT_MTP_ONLY && strcmp(n, "model.embed_tokens.weight") && strcmp(n, "model.norm.weight") &&
        strcmp(n, "lm_head.weight") && strcmp(n, "embed_tokens.weight") && strcmp(n, "norm.weight"))
        return true;
    if (strlen(n) + 1 > cap) return nx_fail(err, "tensor name '%s' too long", in);
    memcpy(out, n, strlen(n) + 1);
    *keep = true;
    return true;
}

/* Fills t (name, rule data, shape check) for a normalised HF name. */
static bool map_tensor(const cv_hp *hp, uint32_t n_vocab, const char *hf, const nx_st_tensor *src, cv_tensor *t,
                       const cv_rule **rule_out, uint32_t *layer_out, nx_err *err) {
    uint64_t want[3];
    uint32_t nd;
    *rule_out = NULL;
    *layer_out = UINT32_MAX;
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    t->op = OP_NONE;
    t->perm = P_NONE;
    if (!strcmp(hf, "model.embed_tokens.weight") || !strcmp(hf, "embed_tokens.weight")) {
        snprintf(t->name, sizeof t->name, "token_embd.weight");
        nd = expected_shape(hp, S_VE, n_vocab, want);
    } else if (!strcmp(hf, "model.norm.weight") || !strcmp(hf, "norm.weight")) {
        snprintf(t->name, sizeof t->name, "output_norm.weight");
        t->op = OP_PLUS_ONE;
        nd = expected_shape(hp, S_E, n_vocab, want);
    } else if (!strcmp(hf, "lm_head.weight")) {
        snprintf(t->name, sizeof t->name, "output.weight");
        nd = expected_shape(hp, S_VE, n_vocab, want);
    } else {
        unsigned layer;
        int used = 0;
        if (sscanf(hf, "model.layers.%u.%n", &layer, &used) != 1 || used == 0)
            return nx_fail(err, "cannot map tensor '%s' (not a Qwen3.5 text-model tensor)", hf);
        const char *suffix = hf + used;
        const cv_rule *rule = NULL;
        for (size_t i = 0; i < N_RULES && !rule; i++)
            if (layer_rules[i].hf && !strcmp(suffix, layer_rules[i].hf)) rule = &layer_rules[i];
        if (!rule) return nx_fail(err, "cannot map tensor '%s' (unknown layer tensor '%s')", hf, suffix);
        if (layer >= hp->L + hp->n_mtp)
            return nx_fail(err, "tensor '%s': layer %u beyond num_hidden_layers %u + MTP layers %u", hf, layer, hp->L,
                           hp->n_mtp);
        if ((rule->kind == K_DENSE && hp->moe) || (rule->kind == K_MOE && !hp->moe))
            return nx_fail(err, "tensor '%s' belongs to a %s FFN, but config.json describes a %s model", hf,
                           hp->moe ? "dense" : "mixture-of-experts", hp->moe ? "mixture-of-experts" : "dense");
        bool attn = is_attn_layer(hp, layer);
        if ((rule->kind == K_ATTN && !attn) || (rule->kind == K_GDN && attn) || (rule->kind == K_NEXTN && layer != hp->L))
            return nx_fail(err, "tensor '%s' does not belong in layer %u (a %s layer)", hf, layer,
                           layer >= hp->L ? "MTP" : attn ? "full-attention" : "linear-attention");
        snprintf(t->name, sizeof t->name, "blk.%u.%s", layer, rule->gguf);
        t->op = rule->op;
        if (hp->Hk != hp->Hv && rule->perm != P_NONE) {
            t->perm = rule->perm;
            t->perm_hd = rule->head_rows ? rule->head_rows : hp->dv;
            t->perm_first = rule->perm == P_ROWS_V ? 2ull * hp->Hk * hp->dk : 0;
        }
        nd = expected_shape(hp, rule->shape, n_vocab, want);
        *rule_out = rule;
        *layer_out = layer;
    }
    if (!check_shape(src, hf, nd, want, err)) return false;
    t->src = src;
    /* GGUF dims: PyTorch order reversed, with conv1d's middle 1 squeezed away. */
    uint64_t dims[3];
    uint32_t k = 0;
    for (uint32_t i = 0; i < nd; i++)
        if (!(*rule_out && (*rule_out)->shape == S_CONV && i == 1)) dims[k++] = want[i];
    t->n_dims = k;
    for (uint32_t i = 0; i < NX_GGUF_MAX_DIMS; i++) t->ne[i] = 1;
    for (uint32_t i = 0; i < k; i++) t->ne[i] = dims[k - 1 - i];
    t->cols = t->ne[0];
    t->rows = k > 1 ? t->ne[1] : 1;
    t->part_rows = t->rows;
    t->n_parts = 1;
    t->round_f16 = src->dtype == NX_ST_F16 && t->op != OP_NONE;
    if (src->dtype != NX_ST_F32 && src->dtype != NX_ST_F16 && src->dtype != NX_ST_BF16)
        return nx_fail(err, "tensor '%s': dtype %s is not supported (F32, F16, BF16)", hf, nx_st_dtype_name(src->dtype));
    return true;
}

/* ---- routed experts --------------------------------------------------------------------- */

/* The per-expert tensors of one layer: src[proj * n_expert + x], proj 0 gate, 1 up, 2 down. */
typedef struct cv_group {
    const nx_st_tensor **src;
    uint32_t count;
} cv_group;

typedef enum { X_NONE, X_ONE, X_FUSED_GATE_UP, X_FUSED_DOWN } cv_xkind;

/* Routed-expert names after "model.layers.N.": mlp.experts.X.{gate,up,down}_proj.weight (one
 * expert), mlp.experts.gate_up_proj / mlp.experts.down_proj (all experts, with or without
 * ".weight", as transformers v5 stores them). */
static cv_xkind expert_name(const char *suffix, uint32_t *x, int *proj) {
    static const char *const projs[3] = {"gate_proj.weight", "up_proj.weight", "down_proj.weight"};
    if (strncmp(suffix, "mlp.experts.", 12)) return X_NONE;
    const char *r = suffix + 12;
    if (!strcmp(r, "gate_up_proj") || !strcmp(r, "gate_up_proj.weight")) return X_FUSED_GATE_UP;
    if (!strcmp(r, "down_proj") || !strcmp(r, "down_proj.weight")) return X_FUSED_DOWN;
    uint64_t v = 0;
    const char *d = r;
    while (*d >= '0' && *d <= '9' && v <= UINT32_MAX) v = v * 10 + (uint64_t)(*d++ - '0');
    if (d == r || *d != '.' || v > UINT32_MAX || (d - r > 1 && r[0] == '0')) return X_NONE;
    for (int i = 0; i < 3; i++)
        if (!strcmp(d + 1, projs[i])) { *x = (uint32_t)v; *proj = i; return X_ONE; }
    return X_NONE;
}

/* Appends a 3-D expert tensor produced one expert at a time. */
static cv_tensor *add_expert_tensor(const cv_hp *hp, uint32_t layer, const char *gguf, const char *hf,
                                    const nx_st_tensor *src, uint64_t ne0, uint64_t ne1, cv_tensor *ts, size_t *n_t) {
    cv_tensor *t = &ts[(*n_t)++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "blk.%u.%s", layer, gguf);
    snprintf(t->hf, sizeof t->hf, "%s", hf);
    t->src = src;
    t->n_dims = 3;
    for (uint32_t i = 0; i < NX_GGUF_MAX_DIMS; i++) t->ne[i] = 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = hp->n_expert;
    t->cols = ne0;
    t->rows = ne1 * hp->n_expert;
    t->part_rows = ne1;
    t->n_parts = hp->n_expert;
    t->op = OP_NONE;
    t->perm = P_NONE;
    return t;
}

/* Maps one routed-expert source tensor (hf = its normalised name, suffix = after the layer
 * prefix).  Per-expert tensors are collected in groups[layer]; when the layer's 3 * n_expert
 * tensors are all there, the stacked down, gate, up tensors are appended (llama.cpp's order and
 * position; with fuse: down, then gate_up).  A fused gate_up source is split into gate and up
 * (or kept whole with fuse), a fused down source is one tensor. */
static bool map_expert(const cv_hp *hp, const char *hf, uint32_t layer, cv_xkind kind, uint32_t x, int proj,
                       const nx_st_tensor *src, cv_group *groups, cv_tensor *ts, size_t *n_t, bool fuse, nx_err *err) {
    if (!hp->moe)
        return nx_fail(err, "tensor '%s' belongs to a mixture-of-experts FFN, but config.json describes a dense model",
                       hf);
    if (layer >= hp->L + hp->n_mtp)
        return nx_fail(err, "tensor '%s': layer %u beyond num_hidden_layers %u + MTP layers %u", hf, layer, hp->L,
                       hp->n_mtp);
    if (src->dtype != NX_ST_F32 && src->dtype != NX_ST_F16 && src->dtype != NX_ST_BF16)
        return nx_fail(err, "tensor '%s': dtype %s is not supported (F32, F16, BF16)", hf, nx_st_dtype_name(src->dtype));
    uint64_t want[3];
    const uint64_t E = hp->E, Fe = hp->Fe;
    char label[CV_MAX_NAME * 2];
    if (kind == X_FUSED_GATE_UP) {
        if (!check_shape(src, hf, expected_shape(hp, S_X2FE, 0, want), want, err)) return false;
        if (fuse) {
            add_expert_tensor(hp, layer, "ffn_gate_up_exps.weight", hf, src, E, 2 * Fe, ts, n_t);
            return true;
        }
        cv_tensor *g = add_expert_tensor(hp, layer, "ffn_gate_exps.weight", hf, src, E, Fe, ts, n_t);
        cv_tensor *u = add_expert_tensor(hp, layer, "ffn_up_exps.weight", hf, src, E, Fe, ts, n_t);
        g->slab_rows = u->slab_rows = 2 * Fe;
        u->slab_off = Fe;
        return true;
    }
    if (kind == X_FUSED_DOWN) {
        if (!check_shape(src, hf, expected_shape(hp, S_XEF3, 0, want), want, err)) return false;
        add_expert_tensor(hp, layer, "ffn_down_exps.weight", hf, src, Fe, E, ts, n_t);
        return true;
    }
    if (x >= hp->n_expert) return nx_fail(err, "tensor '%s': expert %u, but num_experts is %u", hf, x, hp->n_expert);
    if (!check_shape(src, hf, expected_shape(hp, proj == 2 ? S_XEF : S_XFE, 0, want), want, err)) return false;
    cv_group *g = &groups[layer];
    if (!g->src) {
        g->src = nx_calloc(3 * (size_t)hp->n_expert, sizeof *g->src, "expert list", err);
        if (!g->src) return false;
    }
    const nx_st_tensor **slot = &g->src[(size_t)proj * hp->n_expert + x];
    if (*slot) return nx_fail(err, "tensors '%s' and '%s' are the same expert tensor", (*slot)->name, src->name);
    for (size_t i = 0; i < 3 * (size_t)hp->n_expert; i++)
        if (g->src[i] && g->src[i]->dtype != src->dtype)
            return nx_fail(err, "tensor '%s' is %s but '%s' of the same layer's experts is %s", src->name,
                           nx_st_dtype_name(src->dtype), g->src[i]->name, nx_st_dtype_name(g->src[i]->dtype));
    *slot = src;
    if (++g->count < 3 * hp->n_expert) return true;
    const nx_st_tensor *const *gate = g->src, *const *up = g->src + hp->n_expert, *const *down = g->src + 2 * hp->n_expert;
    snprintf(label, sizeof label, "model.layers.%u.mlp.experts.*.down_proj.weight", layer);
    add_expert_tensor(hp, layer, "ffn_down_exps.weight", label, down[0], Fe, E, ts, n_t)->srcs = down;
    if (fuse) {
        snprintf(label, sizeof label, "model.layers.%u.mlp.experts.*.{gate,up}_proj.weight", layer);
        cv_tensor *t = add_expert_tensor(hp, layer, "ffn_gate_up_exps.weight", label, gate[0], E, 2 * Fe, ts, n_t);
        t->srcs = gate;
        t->srcs2 = up;
        t->half = Fe;
        return true;
    }
    snprintf(label, sizeof label, "model.layers.%u.mlp.experts.*.gate_proj.weight", layer);
    add_expert_tensor(hp, layer, "ffn_gate_exps.weight", label, gate[0], E, Fe, ts, n_t)->srcs = gate;
    snprintf(label, sizeof label, "model.layers.%u.mlp.experts.*.up_proj.weight", layer);
    add_expert_tensor(hp, layer, "ffn_up_exps.weight", label, up[0], E, Fe, ts, n_t)->srcs = up;
    return true;
}

/* Every layer that has some per-expert tensors must have all of them. */
static bool check_groups(const cv_hp *hp, const cv_group *groups, uint32_t n_layers, nx_err *err) {
    static const char *const projs[3] = {"gate_proj", "up_proj", "down_proj"};
    for (uint32_t l = 0; l < n_layers; l++) {
        const cv_group *g = &groups[l];
        if (!g->src || g->count == 3 * hp->n_expert) continue;
        for (size_t i = 0; i < 3 * (size_t)hp->n_expert; i++)
            if (!g->src[i])
                return nx_fail(err, "layer %u has %u of the %u per-expert tensors; missing "
                               "mlp.experts.%zu.%s.weight%s", l, g->count, 3 * hp->n_expert, i % hp->n_expert,
                               projs[i / hp->n_expert], l >= hp->L ? " (MTP block)" : "");
    }
    return true;
}

/* Output type, following llama.cpp's prepare_tensors rules. */
static uint32_t output_type(const cv_tensor *t, uint32_t requested) {
    size_t ln = strlen(t->name);
    bool ends_weight = ln >= 7 && !strcmp(t->name + ln - 7, ".weight");
    bool norm = ln >= 12 && !strcmp(t->name + ln - 12, "_norm.weight");
    if (t->n_dims <= 1 || norm || strstr(t->name, "ssm_conv1d") || !ends_weight) return NX_TYPE_F32;
    /* the routers stay F32 (llama.cpp's converter: FFN_GATE_INP, FFN_GATE_INP_SHEXP) */
    if ((ln >= 20 && !strcmp(t->name + ln - 20, ".ffn_gate_inp.weight")) ||
        (ln >= 26 && !strcmp(t->name + ln - 26, ".ffn_gate_inp_shexp.weight")))
        return NX_TYPE_F32;
    if (requested == NX_TYPE_Q8_0 && t->cols % 32) return NX_TYPE_F16; /* llama.cpp: QuantError -> F16 */
    return requested;
}

/* ---- required tensors ------------------------------------------------------------------ */

static int cmp_cv_name(const void *a, const void *b) {
    return strcmp((*(const cv_tensor *const *)a)->name, (*(const cv_tensor *const *)b)->name);
}

static bool has_name(const cv_tensor *const *sorted, size_t n, const char *name) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(sorted[mid]->name, name);
        if (c == 0) return true;
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return false;
}

/* sorted: the mapped tensors ordered by GGUF name. */
static bool check_complete(const cv_hp *hp, const cv_tensor *const *sorted, size_t n, nx_convert_mtp mtp,
                           bool with_mtp, bool fuse, nx_err *err) {
    char name[CV_MAX_NAME];
    const bool trunk = mtp != NX_CONVERT_MTP_ONLY;
#define NEED(...) do { snprintf(name, sizeof name, __VA_ARGS__); \
        if (!has_name(sorted, n, name)) return nx_fail(err, "checkpoint lacks the tensor for '%s'", name); } while (0)
    NEED("token_embd.weight");
    NEED("output_norm.weight");
    if (!hp->tied) NEED("output.weight");
    uint32_t last = with_mtp ? hp->L + hp->n_mtp : hp->L;
    for (uint32_t l = trunk ? 0 : hp->L; l < last; l++) {
        for (size_t r = 0; r < N_RULES; r++) {
            const cv_rule *rule = &layer_rules[r];
            bool attn = is_attn_layer(hp, l);
            if ((rule->kind == K_ATTN && !attn) || (rule->kind == K_GDN && attn)) continue;
            if (rule->kind == K_NEXTN && l != hp->L) continue;
            if ((rule->kind == K_DENSE && hp->moe) || (rule->kind == K_MOE && !hp->moe)) continue;
            if (fuse && (!strcmp(rule->gguf, "ffn_gate_exps.weight") || !strcmp(rule->gguf, "ffn_up_exps.weight"))) {
                if (!strcmp(rule->gguf, "ffn_gate_exps.weight")) NEED("blk.%u.ffn_gate_up_exps.weight", l);
                continue;
            }
            NEED("blk.%u.%s", l, rule->gguf);
        }
    }
#undef NEED
    return true;
}

/* ---- keys ------------------------------------------------------------------------------ */

/* gguf-py's model_weight_count_rounded_notation(n, min_digits=2): "291K", "0.8B", "27B". */
static void size_label(uint64_t n, char *out, size_t cap) {
    double v;
    const char *suffix;
    if (n > 1e12) { v = (double)n * 1e-12; suffix = "T"; }
    else if (n > 1e9) { v = (double)n * 1e-9; suffix = "B"; }
    else if (n > 1e6) { v = (double)n * 1e-6; suffix = "M"; }
    else { v = (double)n * 1e-3; suffix = "K"; }
    char digits[32];
    snprintf(digits, sizeof digits, "%.0f", nearbyint(v)); /* Python round(): ties to even */
    const char *d = digits;
    while (*d == '0') d++;                                  /* str(...).lstrip('0') */
    int fix = 2 - (int)strlen(d);
    snprintf(out, cap, "%.*f%s", fix > 0 ? fix : 0, v, suffix);
}

/* gguf-py's Metadata.id_to_title on a folder name: '-' -> ' ', and every all-lowercase word
 * that is not a version ("v1.2") or starts with a digit is title-cased ("hf-qwen35-a" ->
 * "Hf Qwen35 A").  ASCII only (Python's title() also handles other scripts). */
static void id_to_title(const char *id, char *out, size_t cap) {
    char tmp[256];
    snprintf(tmp, sizeof tmp, "%s", id);
    for (char *p = tmp; *p; p++) if (*p == '-') *p = ' ';
    size_t k = 0;
    out[0] = 0;
    for (char *w = strtok(tmp, " \t"); w && k + 1 < cap; w = strtok(NULL, " \t")) {
        bool has_lower = false, has_upper = false;
        for (const char *c = w; *c; c++) { has_lower |= *c >= 'a' && *c <= 'z'; has_upper |= *c >= 'A' && *c <= 'Z'; }
        bool version = (w[0] >= '0' && w[0] <= '9');
        if (w[0] == 'v' && w[1] >= '0' && w[1] <= '9') {
            version = true;
            for (const char *c = w + 1; *c; c++) if (!((*c >= '0' && *c <= '9') || *c == '.')) version = false;
        }
        if (k) out[k++] = ' ';
        bool prev_letter = false;
        for (const char *c = w; *c && k + 1 < cap; c++) {
            char ch = *c;
            bool letter = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
            if (has_lower && !has_upper && !version && letter) ch = prev_letter ? ch : (char)(ch - 'a' + 'A');
            prev_letter = letter;
            out[k++] = ch;
        }
        out[k] = 0;
    }
}

static bool add_keys(nx_gguf_writer *w, const cv_hp *hp, const char *name, const char *label, uint32_t block_count,
                     bool nextn, uint32_t out_type, nx_err *err) {
    bool ok = true;
    char k[96];
#define A(call) ok = ok && (call)
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, hp->arch), k)
    /* Order as llama.cpp writes them: architecture, general.*, TextModel parameters (MoE: expert
     * counts after the norm epsilon), Qwen2Moe's expert widths, MTP, Qwen3Next SSM keys, rope
     * dims, quantization version, then the tokenizer. */
    A(nx_gguf_add_str(w, "general.architecture", hp->arch, err));
    A(nx_gguf_add_str(w, "general.type", "model", err));
    A(nx_gguf_add_str(w, "general.name", name, err));
    A(nx_gguf_add_str(w, "general.size_label", label, err));
    A(nx_gguf_add_u32(w, KEY("block_count"), block_count, err));
    if (hp->has_ctx) A(nx_gguf_add_u32(w, KEY("context_length"), hp->n_ctx, err));
    A(nx_gguf_add_u32(w, KEY("embedding_length"), hp->E, err));
    if (hp->has_F) A(nx_gguf_add_u32(w, KEY("feed_forward_length"), hp->F, err));
    A(nx_gguf_add_u32(w, KEY("attention.head_count"), hp->H, err));
    if (hp->has_Hkv) A(nx_gguf_add_u32(w, KEY("attention.head_count_kv"), hp->Hkv, err));
    if (hp->has_sections) A(nx_gguf_add_arr(w, KEY("rope.dimension_sections"), NX_GGUF_INT32, hp->sections, 4, err));
    if (hp->has_theta) A(nx_gguf_add_f32(w, KEY("rope.freq_base"), hp->theta, err));
    A(nx_gguf_add_f32(w, KEY("attention.layer_norm_rms_epsilon"), hp->eps, err));
    if (hp->moe) {
        A(nx_gguf_add_u32(w, KEY("expert_count"), hp->n_expert, err));
        A(nx_gguf_add_u32(w, KEY("expert_used_count"), hp->n_used, err));
    }
    A(nx_gguf_add_u32(w, KEY("attention.key_length"), hp->D, err));
    A(nx_gguf_add_u32(w, KEY("attention.value_length"), hp->D, err));
    A(nx_gguf_add_u32(w, "general.file_type", nx_llama_ftype_of(out_type), err));
    if (hp->moe) {
        A(nx_gguf_add_u32(w, KEY("expert_feed_forward_length"), hp->Fe, err));
        A(nx_gguf_add_u32(w, KEY("expert_shared_feed_forward_length"), hp->Fsh, err));
    }
    if (nextn) A(nx_gguf_add_u32(w, KEY("nextn_predict_layers"), block_count - hp->L, err));
    A(nx_gguf_add_u32(w, KEY("ssm.conv_kernel"), hp->Kc, err));
    A(nx_gguf_add_u32(w, KEY("ssm.state_size"), hp->dk, err));
    A(nx_gguf_add_u32(w, KEY("ssm.group_count"), hp->Hk, err));
    A(nx_gguf_add_u32(w, KEY("ssm.time_step_rank"), hp->Hv, err));
    A(nx_gguf_add_u32(w, KEY("ssm.inner_size"), hp->dv * hp->Hv, err));
    A(nx_gguf_add_u32(w, KEY("full_attention_interval"), hp->interval, err));
    A(nx_gguf_add_u32(w, KEY("rope.dimension_count"), hp->R, err));
    if (!hp->has_sections) {
        static const int32_t def[4] = {11, 11, 10, 0};
        A(nx_gguf_add_arr(w, KEY("rope.dimension_sections"), NX_GGUF_INT32, def, 4, err));
    }
    A(nx_gguf_add_u32(w, "general.quantization_version", 2, err));
#undef KEY
#undef A
    return ok;
}

/* general.size_label as gguf-py derives it from the written tensors: the parameter count, or for
 * MoE "<experts>x<shared + one expert's parameters>" (tensors named *_exps.* count as experts). */
static void param_label(const cv_tensor *ts, size_t n, char *out, size_t cap) {
    uint64_t total = 0, shared = 0, expert = 0, expert_sum = 0, n_expert_tensors = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t size = 1;
        for (uint32_t d = 0; d < ts[i].n_dims; d++) size *= ts[i].ne[d];
        total += size;
        if (strstr(ts[i].name, "_exps.") && ts[i].n_dims >= 3) {
            uint64_t count = ts[i].ne[2];
            expert += size / count;
            expert_sum += count;
            n_expert_tensors++;
        } else {
            shared += size;
        }
    }
    if (n_expert_tensors) {
        char pretty[32];
        size_label(shared + expert, pretty, sizeof pretty);
        snprintf(out, cap, "%llux%s", (unsigned long long)(expert_sum / n_expert_tensors), pretty);
    } else {
        size_label(total, out, cap);
    }
}

/* ---- driver ---------------------------------------------------------------------------- */

static void path_join(char *out, size_t cap, const char *dir, const char *file) {
    snprintf(out, cap, "%s/%s", dir, file);
}

static const char *base_name(const char *dir, char *buf, size_t cap) {
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--;
    size_t s = n;
    while (s > 0 && dir[s - 1] != '/') s--;
    snprintf(buf, cap, "%.*s", (int)(n - s), dir + s);
    return buf;
}

bool nx_convert_hf(const char *hf_dir, const char *out_path, const nx_convert_opts *opts, nx_err *err) {
    if (opts->out_type != NX_TYPE_F32 && opts->out_type != NX_TYPE_F16 && opts->out_type != NX_TYPE_BF16 &&
        opts->out_type != NX_TYPE_Q8_0)
        return nx_fail(err, "output type %s not supported by convert (f32, f16, bf16, q8_0)", nx_type_name(opts->out_type));
    char path[4096], path2[4096], path3[4096];
    cv_hp hp;
    path_join(path, sizeof path, hf_dir, "config.json");
    if (!load_hparams(path, &hp, err)) return false;
    if (opts->fuse_gate_up_exps && !hp.moe)
        return nx_fail(err, "%s: fuse_gate_up_exps applies to mixture-of-experts checkpoints, this one is dense", path);

    nx_safetensors *st = NULL;
    nx_hf_vocab vocab;
    memset(&vocab, 0, sizeof vocab);
    bool vocab_loaded = false;
    cv_tensor *ts = NULL;
    nx_gguf_writer *w = NULL;
    cv_job job;
    memset(&job, 0, sizeof job);
    bool ok = nx_st_open_dir(&st, hf_dir, err);

    /* MTP layers: from the config, or counted from mtp.layers.K.* names when it says 0. */
    uint32_t n_mtp_tensors = 0;
    for (uint64_t i = 0; ok && i < nx_st_count(st); i++) {
        const char *nm = nx_st_get(st, i)->name;
        unsigned k;
        if (!strncmp(nm, "model.mtp.", 10)) nm += 6;
        if (sscanf(nm, "mtp.layers.%u.", &k) == 1 && k + 1 > n_mtp_tensors) n_mtp_tensors = k + 1;
    }
    if (ok && hp.n_mtp == 0) hp.n_mtp = n_mtp_tensors;
    if (ok && hp.n_mtp > 0 && n_mtp_tensors == 0)
        ok = nx_fail(err, "%s: config.json declares mtp_num_hidden_layers %u but the checkpoint has no mtp.layers.* "
                     "tensors", hf_dir, hp.n_mtp);
    bool with_mtp = ok && hp.n_mtp > 0 && opts->mtp != NX_CONVERT_MTP_DROP;
    if (ok && opts->mtp == NX_CONVERT_MTP_ONLY && !with_mtp)
        ok = nx_fail(err, "%s: mtp = NX_CONVERT_MTP_ONLY asks for the MTP head but the checkpoint has none", hf_dir);

    if (ok) {
        path_join(path, sizeof path, hf_dir, "tokenizer.json");
        path_join(path2, sizeof path2, hf_dir, "tokenizer_config.json");
        path_join(path3, sizeof path3, hf_dir, "config.json");
        ok = nx_hf_vocab_load(&vocab, path, access(path2, F_OK) == 0 ? path2 : NULL, path3, err);
        vocab_loaded = ok;
    }

    /* Map every tensor (a fused gate_up source gives two outputs: at most 2 per source). */
    size_t n_t = 0;
    const uint32_t n_layers = hp.L + hp.n_mtp;
    cv_group *groups = NULL;
    if (ok) {
        ts = nx_calloc(2 * nx_st_count(st) + 1, sizeof *ts, "tensor list", err);
        groups = nx_calloc(n_layers, sizeof *groups, "expert groups", err);
        ok = ts != NULL && groups != NULL;
    }
    uint64_t max_cols = 1;
    for (uint64_t i = 0; ok && i < nx_st_count(st); i++) {
        const nx_st_tensor *src = nx_st_get(st, i);
        char hf[CV_MAX_NAME * 2];
        bool keep;
        ok = normalise_name(src->name, &hp, opts->mtp, hf, sizeof hf, &keep, err);
        if (!ok || !keep) continue;
        const size_t first = n_t;
        unsigned layer;
        int used = 0, proj = 0;
        uint32_t x = 0;
        cv_xkind xk = sscanf(hf, "model.layers.%u.%n", &layer, &used) == 1 && used > 0
                          ? expert_name(hf + used, &x, &proj) : X_NONE;
        if (xk != X_NONE) {
            ok = map_expert(&hp, hf, layer, xk, x, proj, src, groups, ts, &n_t, opts->fuse_gate_up_exps, err);
        } else {
            const cv_rule *rule;
            uint32_t l;
            ok = map_tensor(&hp, vocab.n_tokens, hf, src, &ts[n_t], &rule, &l, err);
            if (ok) n_t++;
        }
        for (size_t j = first; ok && j < n_t; j++) {
            cv_tensor *t = &ts[j];
            t->type = output_type(t, opts->out_type);
            t->job = &job;
            if (t->cols > max_cols) max_cols = t->cols;
            job.total += t->rows * t->cols * nx_st_dtype_size(t->src->dtype);
        }
    }
    ok = ok && check_groups(&hp, groups, n_layers, err);
    /* Names sorted once: duplicates (two HF names mapping to one GGUF name) and the required
     * set are then checked by neighbour comparison and binary search. */
    const cv_tensor **by_name = ok ? nx_calloc(n_t ? n_t : 1, sizeof *by_name, "tensor index", err) : NULL;
    if (ok && !by_name) ok = false;
    if (ok) {
        for (size_t i = 0; i < n_t; i++) by_name[i] = &ts[i];
        qsort(by_name, n_t, sizeof *by_name, cmp_cv_name);
        for (size_t i = 1; ok && i < n_t; i++)
            if (!strcmp(by_name[i - 1]->name, by_name[i]->name))
                ok = nx_fail(err, "tensors '%s' and '%s' both map to '%s'", by_name[i - 1]->hf, by_name[i]->hf,
                             by_name[i]->name);
    }
    ok = ok && check_complete(&hp, by_name, n_t, opts->mtp, with_mtp, opts->fuse_gate_up_exps, err);
    free(by_name);

    if (ok) {
        job.hp = &hp;
        job.t = ts;
        job.n_t = n_t;
        job.opts = opts;
        job.f16_to_f32 = nx_cv_f16_to_f32_best();
        job.q8_0 = nx_cv_q8_0_best();
        job.st = st;
        job.scratch = nx_malloc(2 * max_cols * sizeof(float), "conversion scratch", err);
        ok = job.scratch != NULL;
    }
    if (ok) {
        w = nx_gguf_writer_new(err);
        ok = w != NULL;
    }
    char nbuf[256], title[256];
    const char *name = opts->name;
    if (!name) {
        id_to_title(base_name(hf_dir, nbuf, sizeof nbuf), title, sizeof title);
        name = title;
    }
    char label[48];
    param_label(ts, n_t, label, sizeof label);
    uint32_t block_count = hp.L + (with_mtp ? hp.n_mtp : 0);
    ok = ok && add_keys(w, &hp, name, label, block_count, with_mtp, opts->out_type, err);
    ok = ok && nx_hf_vocab_add_to_gguf(&vocab, w, err);
    for (size_t i = 0; ok && i < n_t; i++)
        ok = nx_gguf_add_tensor_parts(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].ne, ts[i].n_parts, fill_part,
                                      &ts[i], err);
    ok = ok && nx_gguf_writer_write(w, out_path, err);

    nx_gguf_writer_free(w);
    free(job.scratch);
    free(ts);
    for (uint32_t l = 0; groups && l < n_layers; l++) free(groups[l].src);
    free(groups);
    if (vocab_loaded) nx_hf_vocab_free(&vocab);
    nx_st_close(st);
    return ok;
}
