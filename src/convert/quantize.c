/* quantize.c - GGUF re-quantisation (see quantize.h for the rules and their source). */
#include "convert/quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <pthread.h>
#include <regex.h>
#include <sys/mman.h>
#include <unistd.h>

#include "convert/convert_kernels.h"
#include "convert/llama_ftype.h"
#include "nextn_internal.h"

static const nx_quant_mix mixes[] = {
    /* name      general.file_type       base type */
    {"q8_0",     NX_FTYPE_MOSTLY_Q8_0,   NX_TYPE_Q8_0},
    {"q4_0",     NX_FTYPE_MOSTLY_Q4_0,   NX_TYPE_Q4_0},
    {"q5_0",     NX_FTYPE_MOSTLY_Q5_0,   NX_TYPE_Q5_0},
    {"q4_1",     NX_FTYPE_MOSTLY_Q4_1,   NX_TYPE_Q4_1},
    {"q5_1",     NX_FTYPE_MOSTLY_Q5_1,   NX_TYPE_Q5_1},
    {"q6_k",     NX_FTYPE_MOSTLY_Q6_K,   NX_TYPE_Q6_K},
    {"q4_k_s",   NX_FTYPE_MOSTLY_Q4_K_S, NX_TYPE_Q4_K},
    {"q4_k_m",   NX_FTYPE_MOSTLY_Q4_K_M, NX_TYPE_Q4_K},
    {"q5_k_s",   NX_FTYPE_MOSTLY_Q5_K_S, NX_TYPE_Q5_K},
    {"q5_k_m",   NX_FTYPE_MOSTLY_Q5_K_M, NX_TYPE_Q5_K},
    {"q2_k",     NX_FTYPE_MOSTLY_Q2_K,   NX_TYPE_Q2_K},
    {"q2_k_s",   NX_FTYPE_MOSTLY_Q2_K_S, NX_TYPE_Q2_K},   /* needs an importance matrix */
    {"q3_k_s",   NX_FTYPE_MOSTLY_Q3_K_S, NX_TYPE_Q3_K},
    {"q3_k_m",   NX_FTYPE_MOSTLY_Q3_K_M, NX_TYPE_Q3_K},
    {"q3_k_l",   NX_FTYPE_MOSTLY_Q3_K_L, NX_TYPE_Q3_K},
    {"iq4_nl",   NX_FTYPE_MOSTLY_IQ4_NL, NX_TYPE_IQ4_NL},
    {"iq4_xs",   NX_FTYPE_MOSTLY_IQ4_XS, NX_TYPE_IQ4_XS},
    /* not quantised: no rules, no fallback, no --tensor-type (llama.cpp applies them only when
     * the base type is a quantised one) */
    {"f16",      NX_FTYPE_MOSTLY_F16,    NX_TYPE_F16},
    {"bf16",     NX_FTYPE_MOSTLY_BF16,   NX_TYPE_BF16},
    {"f32",      NX_FTYPE_ALL_F32,       NX_TYPE_F32},
};

/* F32, F16 and BF16 are "not quantised" for llama.cpp (ggml_is_quantized). */
static bool is_quantized(uint32_t type) { return type != NX_TYPE_F32 && type != NX_TYPE_F16 && type != NX_TYPE_BF16; }

const nx_quant_mix *nx_quant_mix_find(const char *name) {
    for (size_t i = 0; i < NX_ARRAY_LEN(mixes); i++)
        if (!strcasecmp(name, mixes[i].name)) return &mixes[i];
    return NULL;
}

/* "q8_0, q4_0, ...": the names of the table above, in its order (built once). */
static char mix_names[24 * NX_ARRAY_LEN(mixes)];
static pthread_once_t mix_names_once = PTHREAD_ONCE_INIT;
static void build_mix_names(void) {
    size_t o = 0;
    for (size_t i = 0; i < NX_ARRAY_LEN(mixes) && o < sizeof mix_names; i++)
        o += (size_t)snprintf(mix_names + o, sizeof mix_names - o, "%s%s", i ? ", " : "", mixes[i].name);
}
const char *nx_quant_mix_names(void) {
    pthread_once(&mix_names_once, build_mix_names);
    return mix_names;
}

/* ---- the rule tables ------------------------------------------------------------------------
 * Keep table: tensors never quantised (llama.cpp's tensor_allows_quantization, the entries that
 * can occur in qwen35 / qwen35moe files).  Besides these: < 2 dims, or a name not ending "weight". */
static const char *const keep_substrings[] = {
    "_norm.weight",         /* every RMSNorm weight */
    "ffn_gate_inp.weight",  /* MoE router */
    "ssm_conv1d",           /* depthwise conv kernel */
};

/* Tensor categories (llama.cpp's tensor_get_category, first match wins; ffn_*_exps and
 * ffn_*_shexp fall in the ffn_* categories). */
typedef enum {
    CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_QKV, CAT_ATTN_V, CAT_ATTN_K, CAT_ATTN_Q, CAT_ATTN_OUTPUT, CAT_FFN_UP,
    CAT_FFN_GATE, CAT_FFN_DOWN, CAT_OTHER
} qcat;

static qcat category(const char *name) {
    if (!strcmp(name, "output.weight")) return CAT_OUTPUT;
    if (!strcmp(name, "token_embd.weight")) return CAT_TOKEN_EMBD;
    if (strstr(name, "attn_qkv.weight")) return CAT_ATTN_QKV;
    if (strstr(name, "attn_v.weight")) return CAT_ATTN_V;
    if (strstr(name, "attn_k.weight")) return CAT_ATTN_K;
    if (strstr(name, "attn_q.weight")) return CAT_ATTN_Q;
    if (strstr(name, "attn_output.weight")) return CAT_ATTN_OUTPUT;
    if (strstr(name, "ffn_up")) return CAT_FFN_UP;
    if (strstr(name, "ffn_gate")) return CAT_FFN_GATE;
    if (strstr(name, "ffn_down")) return CAT_FFN_DOWN;
    return CAT_OTHER;
}

/* Bump table: which tensors of which mix get another type, and when.  Every matching row
 * applies, in order (a later row overrides an earlier one), as in llama.cpp's
 * llama_tensor_get_type_impl for these mixes and qwen35 / qwen35moe files (its Falcon and 70B
 * rules cannot apply).  attn_qkv is one of llama.cpp's "attn_v" tensors: same rows, one counter.
 * gqa = head_count / head_count_kv of layer 0; ffn_down's i is as described at the top. */
typedef enum {
    WHEN_ALWAYS,
    WHEN_MORE_BITS_ATTN_V,   /* use_more_bits(i, n) over the attn_v tensors */
    WHEN_MORE_BITS_FFN_DOWN, /* use_more_bits(i, n) over the layers */
    WHEN_8_EXPERTS,          /* expert_count == 8 */
    WHEN_NOT_8_EXPERTS,
    WHEN_GQA4,               /* gqa >= 4 */
    WHEN_ATTN_V_FIRST2,      /* the first two attn_v tensors */
    WHEN_ATTN_V_FIRST4,      /* the first four attn_v tensors */
    WHEN_FFN_DOWN_FIRST16,   /* ffn_down layer i < n / 16 */
    WHEN_FFN_DOWN_FIRST8,    /* ffn_down layer i < n / 8, without an importance matrix */
    WHEN_FFN_DOWN_FIRST8_IM, /* ffn_down layer i < n / 8, with an importance matrix */
    WHEN_FFN_DOWN_FIRST8_ANY,/* ffn_down layer i < n / 8 */
} qwhen;
static const struct {
    const char *mix;        /* NULL = any mix */
    qcat cat;
    qwhen when;
    uint32_t type;
} bumps[] = {
    {"q4_k_m", CAT_ATTN_V,      WHEN_MORE_BITS_ATTN_V,   NX_TYPE_Q6_K},
    {"q4_k_m", CAT_ATTN_QKV,    WHEN_MORE_BITS_ATTN_V,   NX_TYPE_Q6_K},
    {"q5_k_m", CAT_ATTN_V,      WHEN_MORE_BITS_ATTN_V,   NX_TYPE_Q6_K},
    {"q5_k_m", CAT_ATTN_QKV,    WHEN_MORE_BITS_ATTN_V,   NX_TYPE_Q6_K},
    {"q4_k_s", CAT_ATTN_V,      WHEN_ATTN_V_FIRST4,      NX_TYPE_Q5_K},
    {"q4_k_s", CAT_ATTN_QKV,    WHEN_ATTN_V_FIRST4,      NX_TYPE_Q5_K},
    {"q2_k",   CAT_ATTN_V,      WHEN_ALWAYS,             NX_TYPE_Q3_K},
    {"q2_k",   CAT_ATTN_QKV,    WHEN_ALWAYS,             NX_TYPE_Q3_K},
    {"q2_k",   CAT_ATTN_V,      WHEN_GQA4,               NX_TYPE_Q4_K},
    {"q2_k",   CAT_ATTN_QKV,    WHEN_GQA4,               NX_TYPE_Q4_K},
    {"q2_k_s", CAT_ATTN_V,      WHEN_GQA4,               NX_TYPE_Q4_K},
    {"q2_k_s", CAT_ATTN_QKV,    WHEN_GQA4,               NX_TYPE_Q4_K},
    {"q3_k_m", CAT_ATTN_V,      WHEN_ALWAYS,             NX_TYPE_Q4_K},
    {"q3_k_m", CAT_ATTN_QKV,    WHEN_ALWAYS,             NX_TYPE_Q4_K},
    {"q3_k_m", CAT_ATTN_V,      WHEN_ATTN_V_FIRST2,      NX_TYPE_Q5_K},
    {"q3_k_m", CAT_ATTN_QKV,    WHEN_ATTN_V_FIRST2,      NX_TYPE_Q5_K},
    {"q3_k_l", CAT_ATTN_V,      WHEN_ALWAYS,             NX_TYPE_Q5_K},
    {"q3_k_l", CAT_ATTN_QKV,    WHEN_ALWAYS,             NX_TYPE_Q5_K},
    {"iq4_nl", CAT_ATTN_V,      WHEN_GQA4,               NX_TYPE_Q5_K},
    {"iq4_nl", CAT_ATTN_QKV,    WHEN_GQA4,               NX_TYPE_Q5_K},
    {"iq4_xs", CAT_ATTN_V,      WHEN_GQA4,               NX_TYPE_Q5_K},
    {"iq4_xs", CAT_ATTN_QKV,    WHEN_GQA4,               NX_TYPE_Q5_K},
    {NULL,     CAT_ATTN_V,      WHEN_8_EXPERTS,          NX_TYPE_Q8_0},   /* "for the 8-expert model" */
    {NULL,     CAT_ATTN_QKV,    WHEN_8_EXPERTS,          NX_TYPE_Q8_0},
    {NULL,     CAT_ATTN_K,      WHEN_8_EXPERTS,          NX_TYPE_Q8_0},
    {"q4_k_m", CAT_FFN_DOWN,    WHEN_MORE_BITS_FFN_DOWN, NX_TYPE_Q6_K},
    {"q5_k_m", CAT_FFN_DOWN,    WHEN_MORE_BITS_FFN_DOWN, NX_TYPE_Q6_K},
    {"q4_k_s", CAT_FFN_DOWN,    WHEN_FFN_DOWN_FIRST8_ANY,NX_TYPE_Q5_K},
    {"q2_k",   CAT_FFN_DOWN,    WHEN_ALWAYS,             NX_TYPE_Q3_K},
    {"q2_k_s", CAT_FFN_DOWN,    WHEN_FFN_DOWN_FIRST8_ANY,NX_TYPE_Q4_K},
    {"q3_k_m", CAT_FFN_DOWN,    WHEN_ALWAYS,             NX_TYPE_Q4_K},
    {"q3_k_m", CAT_FFN_DOWN,    WHEN_FFN_DOWN_FIRST16,   NX_TYPE_Q5_K},
    {"q3_k_l", CAT_FFN_DOWN,    WHEN_ALWAYS,             NX_TYPE_Q5_K},
    {"iq4_nl", CAT_FFN_DOWN,    WHEN_FFN_DOWN_FIRST8,    NX_TYPE_Q5_K},
    {"iq4_xs", CAT_FFN_DOWN,    WHEN_FFN_DOWN_FIRST8,    NX_TYPE_Q5_K},
    {"q4_0",   CAT_FFN_DOWN,    WHEN_FFN_DOWN_FIRST8_IM, NX_TYPE_Q4_1},
    {"q5_0",   CAT_FFN_DOWN,    WHEN_FFN_DOWN_FIRST8_IM, NX_TYPE_Q5_1},
    {"q4_k_m", CAT_ATTN_OUTPUT, WHEN_8_EXPERTS,          NX_TYPE_Q5_K},
    {"q4_k_s", CAT_ATTN_OUTPUT, WHEN_8_EXPERTS,          NX_TYPE_Q5_K},
    {"q2_k",   CAT_ATTN_OUTPUT, WHEN_8_EXPERTS,          NX_TYPE_Q5_K},
    {"q3_k_s", CAT_ATTN_OUTPUT, WHEN_8_EXPERTS,          NX_TYPE_Q5_K},
    {"q3_k_m", CAT_ATTN_OUTPUT, WHEN_8_EXPERTS,          NX_TYPE_Q5_K},
    {"iq4_nl", CAT_ATTN_OUTPUT, WHEN_8_EXPERTS,          NX_TYPE_Q5_K},
    {"iq4_xs", CAT_ATTN_OUTPUT, WHEN_8_EXPERTS,          NX_TYPE_Q5_K},
    {"q2_k",   CAT_ATTN_OUTPUT, WHEN_NOT_8_EXPERTS,      NX_TYPE_Q3_K},
    {"q3_k_m", CAT_ATTN_OUTPUT, WHEN_NOT_8_EXPERTS,      NX_TYPE_Q4_K},
    {"q3_k_l", CAT_ATTN_OUTPUT, WHEN_NOT_8_EXPERTS,      NX_TYPE_Q5_K},
};

/* llama.cpp's use_more_bits(i, n). */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int64_t block_of(uint32_t type) {
    const nx_type_traits *t = nx_type_get(type);
    return t ? t->block_size : 1;
}

/* Rows not a multiple of the block size: llama.cpp's tensor_type_fallback (then F16 when even
 * the fallback does not fit).  llama-quantize defines no fallback for the 32-element formats
 * (q8_0, q4_0, q5_0, iq4_nl, ...) and fails: NX_QTYPE_NONE. */
static const struct { uint32_t from, to; } fallbacks[] = {
    {NX_TYPE_Q2_K, NX_TYPE_Q4_0}, {NX_TYPE_Q3_K, NX_TYPE_Q4_0}, {NX_TYPE_Q4_K, NX_TYPE_Q5_0},
    {NX_TYPE_Q5_K, NX_TYPE_Q5_1}, {NX_TYPE_Q6_K, NX_TYPE_Q8_0}, {NX_TYPE_IQ4_XS, NX_TYPE_IQ4_NL},
};

static uint32_t fallback(nx_qstate *s, uint32_t type, uint64_t ne0) {
    s->wanted = type;
    if (ne0 % (uint64_t)block_of(type) == 0) return type;
    uint32_t f = NX_QTYPE_NONE;
    for (size_t i = 0; i < NX_ARRAY_LEN(fallbacks); i++)
        if (fallbacks[i].from == type) f = fallbacks[i].to;
    if (f == NX_QTYPE_NONE) return f;
    return ne0 % (uint64_t)block_of(f) == 0 ? f : NX_TYPE_F16;
}

static bool allows_quantization(const char *name, uint32_t n_dims) {
    size_t n = strlen(name);
    if (n_dims < 2 || n < 6 || strcmp(name + n - 6, "weight")) return false;
    for (size_t i = 0; i < NX_ARRAY_LEN(keep_substrings); i++)
        if (strstr(name, keep_substrings[i])) return false;
    return true;
}

void nx_qstate_init(nx_qstate *s, const nx_quant_mix *mix, const char *const *names, size_t n, uint32_t block_count) {
    memset(s, 0, sizeof *s);
    s->mix = mix;
    s->tied = true;
    for (size_t i = 0; i < n; i++) {
        qcat c = category(names[i]);
        if (c == CAT_ATTN_V || c == CAT_ATTN_QKV) s->n_attn_v++;
        if (c == CAT_OUTPUT) s->tied = false;
    }
    s->n_ffn_down = (int)block_count;
    s->output_type = s->token_embd_type = NX_QTYPE_NONE;
}

uint32_t nx_qstate_choose(nx_qstate *s, const char *name, uint32_t n_dims, uint64_t ne0, uint32_t cur_type) {
    if (!allows_quantization(name, n_dims)) return s->wanted = cur_type;
    /* explicit types for the embeddings and the head: as given, no fallback (llama.cpp) */
    if (s->token_embd_type != NX_QTYPE_NONE && !strcmp(name, "token_embd.weight")) return s->wanted = s->token_embd_type;
    if (s->output_type != NX_QTYPE_NONE && !strcmp(name, "output.weight")) return s->wanted = s->output_type;
    if (!is_quantized(s->mix->base_type)) return s->wanted = s->mix->base_type;
    /* --tensor-type overrides: the first matching pattern decides; the rules (and their
     * counters) are skipped for that tensor, only the block-size fallback applies (llama.cpp) */
    for (size_t i = 0; i < s->n_overrides; i++)
        if (regexec(&s->override_re[i], name, 0, NULL, 0) == 0) return fallback(s, s->overrides[i].type, ne0);
    const uint32_t base = s->mix->base_type;
    if (s->pure) return fallback(s, base, ne0);
    uint32_t t = base;
    qcat c = category(name);
    if (c == CAT_OUTPUT || (s->tied && c == CAT_TOKEN_EMBD)) {
        /* the LM head: Q6_K, or Q8_0 when the rows do not fit the base type's blocks or the mix is q8_0 */
        if (ne0 % (uint64_t)block_of(base) != 0) t = NX_TYPE_Q8_0;
        else if (base != NX_TYPE_Q8_0) t = NX_TYPE_Q6_K;
    } else {
        /* ffn_down's position: its counter, or with several experts its block number (llama.cpp
         * parses it from the name: a MoE layer has two ffn_down tensors, exps and shexp) */
        int i_down = s->i_ffn_down, blk;
        if (c == CAT_FFN_DOWN && s->n_expert > 1 && sscanf(name, "blk.%d.", &blk) == 1) i_down = blk;
        for (size_t i = 0; i < NX_ARRAY_LEN(bumps); i++) {
            if (bumps[i].cat != c || (bumps[i].mix && strcasecmp(bumps[i].mix, s->mix->name))) continue;
            bool on = false;
            switch (bumps[i].when) {
            case WHEN_ALWAYS: on = true; break;
            case WHEN_MORE_BITS_ATTN_V: on = more_bits(s->i_attn_v, s->n_attn_v); break;
            case WHEN_MORE_BITS_FFN_DOWN: on = more_bits(i_down, s->n_ffn_down); break;
            case WHEN_8_EXPERTS: on = s->n_expert == 8; break;
            case WHEN_NOT_8_EXPERTS: on = s->n_expert != 8; break;
            case WHEN_GQA4: on = s->n_gqa >= 4; break;
            case WHEN_ATTN_V_FIRST2: on = s->i_attn_v < 2; break;
            case WHEN_ATTN_V_FIRST4: on = s->i_attn_v < 4; break;
            case WHEN_FFN_DOWN_FIRST16: on = i_down < s->n_ffn_down / 16; break;
            case WHEN_FFN_DOWN_FIRST8: on = !s->has_imatrix && i_down < s->n_ffn_down / 8; break;
            case WHEN_FFN_DOWN_FIRST8_IM: on = s->has_imatrix && i_down < s->n_ffn_down / 8; break;
            case WHEN_FFN_DOWN_FIRST8_ANY: on = i_down < s->n_ffn_down / 8; break;
            }
            if (on) t = bumps[i].type;
        }
        /* the counters advance for every such tensor, whatever the mix */
        if (c == CAT_ATTN_V || c == CAT_ATTN_QKV) s->i_attn_v++;
        if (c == CAT_FFN_DOWN) s->i_ffn_down++;
    }
    return fallback(s, t, ne0);
}

/* ---- processing order ------------------------------------------------------------------------
 * llama.cpp's weight_name_comparer: block number first (-1 for non-block tensors), then name. */
static int block_number(const char *name) {
    int b = -1;
    if (sscanf(name, "blk.%d.", &b) != 1) b = -1;
    return b;
}

typedef struct qtensor {
    const nx_gguf_tensor *src;
    char name[128];
    uint32_t type;
    uint32_t n_dims;
    uint64_t rows;
    struct qjob *job;
    const float *imatrix;     /* importance weights: ne[0] per matrix (ne[2] matrices), or NULL */
} qtensor;

static int cmp_qtensor(const void *a, const void *b) {
    const qtensor *x = a, *y = b;
    int bx = block_number(x->name), by = block_number(y->name);
    if (bx != by) return bx < by ? -1 : 1;
    return strcmp(x->name, y->name);
}

typedef struct qjob {
    nx_pool *pool;
    float *scratch;           /* n_threads x max_cols */
    uint64_t max_cols;
    uint64_t done, total;
    nx_progress_fn progress;
    void *progress_user;
    const struct qtensor *ts;  /* all tensors, in output order (progress: the index) */
    uint64_t n_ts;
    /* current tensor, for the workers */
    const qtensor *cur;
    void *dst;
    size_t src_row_bytes, dst_row_bytes;
    nx_cv_f16_to_f32_fn f16_to_f32;
    nx_cv_q8_0_fn q8_0;
} qjob;

/* Drops the input pages of a processed tensor (whole pages inside it) from the process's
 * resident set; advisory, the mapping stays valid. */
static void release_pages(const void *data, uint64_t nbytes) {
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)data + page - 1) & ~(page - 1), b = ((uintptr_t)data + nbytes) & ~(page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

static void convert_rows(void *ctx, int ith, int nth) {
    qjob *j = ctx;
    const qtensor *t = j->cur;
    const nx_type_traits *from = nx_type_get(t->src->type), *to = nx_type_get(t->type);
    uint64_t r0 = t->rows * (uint64_t)ith / (uint64_t)nth, r1 = t->rows * (uint64_t)(ith + 1) / (uint64_t)nth;
    float *row = j->scratch + (size_t)ith * j->max_cols;
    const uint64_t n = t->src->ne[0];
    const uint64_t rows_per_mat = t->src->ne[1];
    for (uint64_t r = r0; r < r1; r++) {
        const uint8_t *src = (const uint8_t *)t->src->data + r * j->src_row_bytes;
        uint8_t *dst = (uint8_t *)j->dst + r * j->dst_row_bytes;
        /* the converter's SIMD kernels where they apply (bit-identical to the reference) */
        if (t->src->type == NX_TYPE_F16) j->f16_to_f32(src, row, n);
        else from->to_float(src, row, (int64_t)n);
        if (t->imatrix && to->from_float_w) /* matrix r / ne[1] of a 3-D tensor: its own weights */
            to->from_float_w(row, dst, (int64_t)n, t->imatrix + (r / rows_per_mat % t->src->ne[2]) * n);
        else if (t->type == NX_TYPE_Q8_0) j->q8_0(row, dst, n);
        else to->from_float(row, dst, (int64_t)n);
    }
}

static bool fill(void *user, void *dst, uint64_t nbytes, nx_err *err) {
    qtensor *t = user;
    qjob *j = t->job;
    if (t->type == t->src->type) {
        if (nbytes != t->src->nbytes) return nx_fail(err, "%s: size mismatch", t->name);
        memcpy(dst, t->src->data, nbytes);
    } else {
        size_t sb, db;
        if (!nx_row_size(t->src->type, (int64_t)t->src->ne[0], &sb, err) ||
            !nx_row_size(t->type, (int64_t)t->src->ne[0], &db, err))
            return nx_fail_prefix(err, "%s", t->name);
        j->cur = t;
        j->dst = dst;
        j->src_row_bytes = sb;
        j->dst_row_bytes = db;
        if (j->pool) nx_pool_run(j->pool, convert_rows, j);
        else convert_rows(j, 0, 1);
    }
    release_pages(t->src->data, t->src->nbytes);
    j->done += t->src->nbytes;
    if (j->progress) {
        nx_progress p = {(uint64_t)(t - j->ts) + 1, j->n_ts, j->done, j->total, t->name, nx_type_name(t->type)};
        j->progress(j->progress_user, &p);
    }
    return true;
}

static bool quantize_file(const char *in_path, const char *out_path, const nx_quant_mix *mix,
                          const nx_quant_opts *opts, const regex_t *override_re, nx_pool *pool,
                          nx_progress_fn progress, void *progress_user, nx_err *err);

/* <arch>.attention.<key>: a u32, or the first element of a per-layer array; 0 if absent. */
static bool head_count(const nx_gguf *g, nx_str arch, const char *key, uint32_t *out, nx_err *err) {
    char k[160];
    snprintf(k, sizeof k, "%.*s.attention.%s", (int)(arch.len < 100 ? arch.len : 100), arch.ptr, key);
    *out = 0;
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, k);
    if (!kv) return true;
    if (kv->type == NX_GGUF_ARRAY) {
        const nx_gguf_kv *arr;
        if (!nx_gguf_get_arr(g, k, NX_GGUF_UINT32, &arr, err)) return false;
        const int64_t v = arr->arr_count ? nx_gguf_arr_int(arr, 0) : 0;
        *out = v > 0 && v <= UINT32_MAX ? (uint32_t)v : 0;
        return true;
    }
    return nx_gguf_get_u32(g, k, out, err);
}

bool nx_quantize_file(const char *in_path, const char *out_path, const nx_quant_mix *mix, nx_pool *pool,
                      nx_progress_fn progress, void *progress_user, nx_err *err) {
    return nx_quantize_file_ov(in_path, out_path, mix, NULL, 0, pool, progress, progress_user, err);
}

bool nx_quant_override_parse(const char *arg, nx_quant_override *out, nx_err *err) {
    const char *eq = strrchr(arg, '=');
    if (!eq || eq == arg || !eq[1]) return nx_fail(err, "tensor type '%s': expected PATTERN=TYPE", arg);
    nx_type t;
    if (!nx_type_from_name(eq + 1, &t) || !nx_type_get(t)->from_float)
        return nx_fail(err, "tensor type '%s': '%s' is not a type nextn can quantise to", arg, eq + 1);
    const size_t n = (size_t)(eq - arg);
    if (n >= sizeof out->pattern) return nx_fail(err, "tensor type '%s': pattern longer than %zu bytes", arg, sizeof out->pattern - 1);
    for (size_t i = 0; i < n; i++) out->pattern[i] = (char)(arg[i] >= 'A' && arg[i] <= 'Z' ? arg[i] - 'A' + 'a' : arg[i]);
    out->pattern[n] = 0;
    out->type = t;
    regex_t re;
    int rc = regcomp(&re, out->pattern, REG_EXTENDED | REG_NOSUB);
    if (rc) {
        char msg[128];
        regerror(rc, &re, msg, sizeof msg);
        return nx_fail(err, "tensor type '%s': bad pattern: %s", arg, msg);
    }
    regfree(&re);
    return true;
}

bool nx_quantize_file_ov(const char *in_path, const char *out_path, const nx_quant_mix *mix,
                         const nx_quant_override *overrides, size_t n_overrides, nx_pool *pool,
                         nx_progress_fn progress, void *progress_user, nx_err *err) {
    nx_quant_opts o = {.overrides = overrides, .n_overrides = n_overrides};
    return nx_quantize_file_ex(in_path, out_path, mix, &o, pool, progress, progress_user, err);
}

bool nx_quantize_file_ex(const char *in_path, const char *out_path, const nx_quant_mix *mix,
                         const nx_quant_opts *opts, nx_pool *pool, nx_progress_fn progress, void *progress_user,
                         nx_err *err) {
    const nx_quant_override *overrides = opts->overrides;
    const size_t n_overrides = opts->n_overrides;
    if (opts->imatrix && !opts->imatrix_path) return nx_fail(err, "imatrix given without its file name");
    regex_t *re = n_overrides ? nx_calloc(n_overrides, sizeof *re, "tensor type patterns", err) : NULL;
    if (n_overrides && !re) return false;
    size_t n_re = 0;
    for (; n_re < n_overrides; n_re++)
        if (regcomp(&re[n_re], overrides[n_re].pattern, REG_EXTENDED | REG_NOSUB)) {
            for (size_t i = 0; i < n_re; i++) regfree(&re[i]);
            free(re);
            return nx_fail(err, "tensor type pattern '%s' does not compile", overrides[n_re].pattern);
        }
    bool ok = quantize_file(in_path, out_path, mix, opts, re, pool, progress, progress_user, err);
    for (size_t i = 0; i < n_re; i++) regfree(&re[i]);
    free(re);
    return ok;
}

static bool quantize_file(const char *in_path, const char *out_path, const nx_quant_mix *mix,
                          const nx_quant_opts *opts, const regex_t *override_re, nx_pool *pool,
                          nx_progress_fn progress, void *progress_user, nx_err *err) {
    const nx_imatrix *im = opts->imatrix;
    nx_gguf *g = NULL;
    if (!nx_gguf_open(&g, in_path, err)) return false;
    qtensor *ts = nx_calloc(g->n_tensors ? g->n_tensors : 1, sizeof *ts, "tensor list", err);
    const char **names = nx_calloc(g->n_tensors ? g->n_tensors : 1, sizeof *names, "tensor names", err);
    nx_gguf_writer *w = NULL;
    qjob job;
    memset(&job, 0, sizeof job);
    bool ok = ts && names;
    /* architecture, block_count (llama.cpp: n_ffn_down = number of layers incl. MTP) and
     * expert_count (absent: dense) */
    nx_str arch = {0};
    uint32_t block_count = 0, n_expert = 0;
    ok = ok && nx_gguf_get_str(g, "general.architecture", &arch, err);
    if (ok) {
        char key[128];
        snprintf(key, sizeof key, "%.*s.block_count", (int)(arch.len < 100 ? arch.len : 100), arch.ptr);
        ok = nx_gguf_get_u32(g, key, &block_count, err);
        snprintf(key, sizeof key, "%.*s.expert_count", (int)(arch.len < 100 ? arch.len : 100), arch.ptr);
        if (ok && nx_gguf_find_kv(g, key)) ok = nx_gguf_get_u32(g, key, &n_expert, err);
    }
    /* n_head / n_head_kv of layer 0 (llama.cpp's n_gqa(); 0 without heads) */
    int n_gqa = 0;
    if (ok) {
        uint32_t nh = 0, nkv = 0;
        ok = head_count(g, arch, "head_count", &nh, err) && head_count(g, arch, "head_count_kv", &nkv, err);
        if (!nkv) nkv = nh; /* llama.cpp: n_head_kv defaults to n_head */
        n_gqa = nkv ? (int)(nh / nkv) : 0;
    }
    for (uint64_t i = 0; ok && i < g->n_tensors; i++) {
        qtensor *t = &ts[i];
        t->src = &g->tensors[i];
        if (t->src->name.len >= sizeof t->name)
            ok = nx_fail(err, "%s: tensor name of %llu bytes too long", in_path, (unsigned long long)t->src->name.len);
        else
            snprintf(t->name, sizeof t->name, "%.*s", (int)t->src->name.len, t->src->name.ptr);
        const nx_type_traits *tr = nx_type_get(t->src->type);
        if (ok && (!tr || !tr->to_float))
            ok = nx_fail(err, "%s: tensor '%s' has type %s, which cannot be dequantised", in_path, t->name,
                         nx_type_name(t->src->type));
        t->n_dims = 1;
        for (uint32_t d = 0; d < NX_GGUF_MAX_DIMS; d++) if (t->src->ne[d] > 1) t->n_dims = d + 1;
        t->rows = t->src->ne[1] * t->src->ne[2] * t->src->ne[3];
        t->job = &job;
        job.total += t->src->nbytes;
        if (t->src->ne[0] > job.max_cols) job.max_cols = t->src->ne[0];
    }
    if (ok) qsort(ts, g->n_tensors, sizeof *ts, cmp_qtensor);
    for (uint64_t i = 0; ok && i < g->n_tensors; i++) names[i] = ts[i].name;
    nx_qstate qs;
    if (ok) nx_qstate_init(&qs, mix, names, g->n_tensors, block_count);
    qs.n_expert = (int)n_expert;
    qs.n_gqa = n_gqa;
    qs.overrides = opts->overrides;
    qs.override_re = override_re;
    qs.n_overrides = opts->n_overrides;
    qs.has_imatrix = im != NULL;
    qs.pure = opts->pure;
    if (opts->has_output_type) qs.output_type = opts->output_type;
    if (opts->has_token_embd_type) qs.token_embd_type = opts->token_embd_type;
    for (uint64_t i = 0; ok && i < g->n_tensors; i++) {
        ts[i].type = nx_qstate_choose(&qs, ts[i].name, ts[i].n_dims, ts[i].src->ne[0], ts[i].src->type);
        if (ts[i].type == NX_QTYPE_NONE) {
            ok = nx_fail(err, "tensor '%s': rows of %llu elements are not a multiple of the %s block of %lld, and "
                         "llama-quantize has no fallback type for %s (it refuses this file too)", ts[i].name,
                         (unsigned long long)ts[i].src->ne[0], nx_type_name(mix->base_type),
                         (long long)block_of(mix->base_type), nx_type_name(mix->base_type));
            break;
        }
        if (ts[i].type != qs.wanted) {
            if (opts->on_fallback) opts->on_fallback(opts->fallback_user, ts[i].name, ts[i].src->ne[0], qs.wanted, ts[i].type);
            if (opts->stats) opts->stats->n_fallback++;
        }
        if (opts->stats) {
            size_t row = 0;
            nx_quant_stats *st = opts->stats;
            st->n_tensors++;
            st->n_elements += ts[i].src->ne[0] * ts[i].rows;
            st->in_bytes += ts[i].src->nbytes;
            if (nx_row_size(ts[i].type, (int64_t)ts[i].src->ne[0], &row, NULL)) st->out_bytes += (uint64_t)row * ts[i].rows;
        }
        const nx_type_traits *to = nx_type_get(ts[i].type);
        if (ts[i].type != ts[i].src->type && (!to || !to->from_float))
            ok = nx_fail(err, "tensor '%s': no quantiser for type %s", ts[i].name, nx_type_name(ts[i].type));
        if (ok && ts[i].type != ts[i].src->type && ts[i].src->ne[0] % (uint64_t)block_of(ts[i].type))
            ok = nx_fail(err, "tensor '%s': rows of %llu elements do not fit the %s block of %lld (an explicit "
                         "output_type / token_embd_type gets no fallback type)", ts[i].name,
                         (unsigned long long)ts[i].src->ne[0], nx_type_name(ts[i].type), (long long)block_of(ts[i].type));
        /* a quantised tensor that changes type loses precision twice: refused unless asked for */
        if (ok && ts[i].type != ts[i].src->type && is_quantized(ts[i].src->type) && !opts->allow_requantize)
            ok = nx_fail(err, "%s: tensor '%s' is already quantised (%s); re-quantising it to %s loses precision "
                         "and is refused unless allow_requantize is set (llama-quantize refuses it too)", in_path,
                         ts[i].name, nx_type_name(ts[i].src->type), nx_type_name(ts[i].type));
        /* llama-quantize's tensor_requires_imatrix: in a q2_k_s file every Q2_K tensor but the
         * embeddings and the head (of the mixes nextn makes; the IQ1/IQ2/IQ3_XXS types it
         * cannot make need one too) */
        const bool needs_im = ok && mix->ftype == NX_FTYPE_MOSTLY_Q2_K_S && ts[i].type == NX_TYPE_Q2_K &&
                              strcmp(ts[i].name, "token_embd.weight") && strcmp(ts[i].name, "output.weight");
        if (needs_im && !im)
            ok = nx_fail(err, "tensor '%s': type %s in a %s file needs an importance matrix (llama-quantize refuses it "
                         "without one too)", ts[i].name, nx_type_name(ts[i].type), mix->name);
        /* importance weights of a tensor that changes type (llama-quantize: ne[0] x ne[2] values;
         * another size is an error, except for token_embd, which then goes without) */
        const nx_imatrix_entry *e = ok && im && ts[i].type != ts[i].src->type ? nx_imatrix_find(im, ts[i].name) : NULL;
        if (e) {
            const uint64_t want = ts[i].src->ne[0] * ts[i].src->ne[2];
            if (e->n == want) ts[i].imatrix = e->values;
            else if (strcmp(ts[i].name, "token_embd.weight"))
                ok = nx_fail(err, "%s: entry '%s' has %llu values, the tensor needs %llu (%llu columns x %llu matrices)",
                             opts->imatrix_path, ts[i].name, (unsigned long long)e->n, (unsigned long long)want,
                             (unsigned long long)ts[i].src->ne[0], (unsigned long long)ts[i].src->ne[2]);
        }
        if (ok && needs_im && ts[i].type != ts[i].src->type && !ts[i].imatrix)
            ok = nx_fail(err, "%s: no importance data for tensor '%s', which a %s file quantises to %s (llama-quantize "
                         "refuses it too)", opts->imatrix_path, ts[i].name, mix->name, nx_type_name(ts[i].type));
    }
    int nth = pool ? nx_pool_size(pool) : 1;
    if (ok) {
        job.pool = pool;
        job.progress = progress;
        job.progress_user = progress_user;
        job.ts = ts;
        job.n_ts = g->n_tensors;
        job.f16_to_f32 = nx_cv_f16_to_f32_best();
        job.q8_0 = nx_cv_q8_0_best();
        job.scratch = nx_malloc((size_t)nth * job.max_cols * sizeof(float), "row scratch", err);
        ok = job.scratch != NULL;
    }
    if (ok) ok = (w = nx_gguf_writer_new(err)) != NULL;
    /* metadata in input order, except that general.quantization_version and general.file_type
     * move to the end in that order (ggml's gguf_set_val_* removes an existing key and appends
     * it); split keys are dropped (one output file); with an importance matrix, llama-quantize's
     * quantize.imatrix.* keys follow (file and dataset names cut to 127 bytes, as it does) */
    char im_file[128] = "", im_dataset[128] = "";
    if (im) {
        snprintf(im_file, sizeof im_file, "%s", opts->imatrix_path);
        if (im->dataset) snprintf(im_dataset, sizeof im_dataset, "%s", im->dataset);
    }
    for (uint64_t i = 0; ok && i < g->n_kv; i++) {
        const nx_gguf_kv *kv = &g->kv[i];
        if (nx_str_eq(kv->key, "general.quantization_version") || nx_str_eq(kv->key, "general.file_type") ||
            nx_str_eq(kv->key, "split.no") || nx_str_eq(kv->key, "split.count") ||
            nx_str_eq(kv->key, "split.tensors.count"))
            continue;
        if (im && (nx_str_eq(kv->key, "quantize.imatrix.file") || nx_str_eq(kv->key, "quantize.imatrix.entries_count") ||
                   (im->dataset && nx_str_eq(kv->key, "quantize.imatrix.dataset")) ||
                   (im->chunk_count > 0 && nx_str_eq(kv->key, "quantize.imatrix.chunks_count"))))
            continue;
        ok = nx_gguf_add_kv_copy(w, kv, err);
    }
    ok = ok && nx_gguf_add_u32(w, "general.quantization_version", 2, err);
    ok = ok && nx_gguf_add_u32(w, "general.file_type", mix->ftype, err);
    if (im) {
        ok = ok && nx_gguf_add_str(w, "quantize.imatrix.file", im_file, err);
        if (im->dataset) ok = ok && nx_gguf_add_str(w, "quantize.imatrix.dataset", im_dataset, err);
        ok = ok && nx_gguf_add_u32(w, "quantize.imatrix.entries_count", (uint32_t)im->n_entries, err);
        if (im->chunk_count > 0) ok = ok && nx_gguf_add_u32(w, "quantize.imatrix.chunks_count", (uint32_t)im->chunk_count, err);
    }
    for (uint64_t i = 0; ok && i < g->n_tensors; i++)
        ok = nx_gguf_add_tensor_fn(w, ts[i].name, ts[i].type, ts[i].n_dims, ts[i].src->ne, fill, &ts[i], err);
    ok = ok && nx_gguf_writer_write(w, out_path, err);
    nx_gguf_writer_free(w);
    free(job.scratch);
    free(names);
    free(ts);
    nx_gguf_close(g);
    return ok;
}
