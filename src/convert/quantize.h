/* quantize.h - GGUF -> GGUF re-quantisation with llama.cpp's per-tensor type rules
 * (llama-quantize of snapshot d32676d7, without importance matrix).
 *
 * Mixes: nx_quant_mix_names(); the low-bit ones' rules are in docs/convert.md.  For every tensor, in llama.cpp's processing order
 * (non-block tensors first, then by block number, names sorted within a block - this is also
 * the output order):
 *   1. tensors that stay as they are: fewer than 2 dims, name not ending in "weight",
 *      "*_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d" (the keep table in quantize.c);
 *   2. otherwise the mix's base type, then the bump table: output.weight (and token_embd.weight
 *      when there is no output.weight) -> Q6_K (Q8_0 if its rows are not a multiple of 256 or
 *      the mix is q8_0); for q4_k_m and q5_k_m, attn_v/attn_qkv and ffn_down -> Q6_K on "more bits" layers
 *      (i < n/8, i >= 7n/8, (i - n/8) % 3 == 2, counted over those tensors in order; for
 *      ffn_down of a model with several experts, i is the block number, so ffn_down_exps and
 *      ffn_down_shexp of one layer share it); with exactly 8 experts (expert_count), attn_v,
 *      attn_qkv and attn_k -> Q8_0 in every mix, and attn_output -> Q5_K for q4_k_m / q4_k_s;
 *      for q4_k_s the first four attn_v/attn_qkv and ffn_down of layers i < n/8 -> Q5_K;
 *   3. rows not a multiple of the type's block: Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16;
 *      for the other types llama-quantize has no fallback and fails, and so does nx_quantize_file
 *      (nx_qstate_choose returns NX_QTYPE_NONE).
 * Values are dequantised to F32 and quantised with the reference quantisers of quant.c (the
 * same bytes as ggml's *_ref functions, which llama-quantize uses without an imatrix).  Tensors
 * whose type does not change are copied byte for byte.  Metadata is copied in order, then
 * general.quantization_version and general.file_type are (re)written at the end, as ggml does.
 */
#ifndef NX_QUANTIZE_H
#define NX_QUANTIZE_H

#include <regex.h>

#include "nextn_internal.h"
#include "convert/imatrix.h"

typedef struct nx_quant_mix {
    const char *name;      /* "q4_k_m" (case-insensitive on input) */
    uint32_t ftype;        /* llama_ftype stored as general.file_type */
    uint32_t base_type;    /* ggml type of most matrices */
} nx_quant_mix;

const nx_quant_mix *nx_quant_mix_find(const char *name);   /* NULL if unknown */
const char *nx_quant_mix_names(void);                       /* "q8_0, q4_0, ..." for messages */

/* Re-quantises in_path into out_path (temp file + rename).  pool may be NULL (single thread).
 * progress (may be NULL) after each tensor: tensor i of n, source bytes done of total, its
 * name and new type name (note). */
bool nx_quantize_file(const char *in_path, const char *out_path, const nx_quant_mix *mix, nx_pool *pool,
                      nx_progress_fn progress, void *progress_user, nx_err *err);

/* Per-tensor type overrides (llama-quantize's --tensor-type PATTERN=TYPE): for a tensor the
 * rules would quantise, the first override whose pattern matches somewhere in its name gives
 * the type; the mix's rules are skipped for it (and it does not advance their layer counters),
 * only the block-size fallback still applies.  Patterns are POSIX extended regular expressions
 * (llama.cpp uses ECMAScript ones: the same for the usual `blk\.[0-9]+\.ffn_down` patterns;
 * no \d), lower-cased as llama-quantize does. */
typedef struct nx_quant_override {
    char pattern[256];
    uint32_t type;
} nx_quant_override;
/* Parses "PATTERN=TYPE" (TYPE a type name with a quantiser, e.g. q6_K / iq4_xs / f16). */
bool nx_quant_override_parse(const char *arg, nx_quant_override *out, nx_err *err);
bool nx_quantize_file_ov(const char *in_path, const char *out_path, const nx_quant_mix *mix,
                         const nx_quant_override *overrides, size_t n_overrides, nx_pool *pool,
                         nx_progress_fn progress, void *progress_user, nx_err *err);

/* All options.  imatrix (may be NULL): importance weights (imatrix.h) for the tensors that
 * change type, passed to the types' importance-aware quantisers (quant.h from_float_w) as
 * llama-quantize --imatrix does: per matrix of a 3-D expert tensor its own row of ne[0]
 * weights; a tensor without an entry is quantised without; an entry of another size than
 * ne[0] x ne[2] is an error (token_embd.weight: ignored).  It also changes two rules: iq4_nl /
 * iq4_xs keep ffn_down of the first n/8 layers in their type (q5_K without), q4_0 / q5_0 put
 * it in q4_1 / q5_1.  imatrix_path is recorded in quantize.imatrix.file, with the dataset
 * name, the entry count and the chunk count (quantize.imatrix.*), as llama-quantize does. */
typedef struct nx_quant_opts {
    const nx_quant_override *overrides;
    size_t n_overrides;
    const struct nx_imatrix *imatrix;
    const char *imatrix_path;
    /* A tensor that is already quantised (not F32/F16/BF16) and would change type is an error
     * unless allow_requantize (llama-quantize's --allow-requantize); one that keeps its type is
     * copied either way. */
    bool allow_requantize;
    /* pure: every quantisable tensor gets the mix's base type (overrides and the block-size
     * fallback still apply; the bump rules do not), as llama-quantize --pure. */
    bool pure;
    /* With has_output_type / has_token_embd_type, output.weight / token_embd.weight get exactly
     * that type, as llama-quantize's --output-tensor-type / --token-embedding-type: no fallback,
     * so their rows must fit its block (an error names the tensor otherwise). */
    bool has_output_type, has_token_embd_type;
    uint32_t output_type, token_embd_type;
    /* Optional report (both may be NULL).  on_fallback is called, before anything is written,
     * for every tensor whose rows (ne0 elements) are not a multiple of the block of the type the
     * rules chose (wanted), with the type it gets instead (used: the fallback type, or F16);
     * stats receives the element count and the input / output tensor bytes of the whole file
     * (bits per weight = 8 * bytes / elements). */
    void (*on_fallback)(void *user, const char *tensor, uint64_t ne0, uint32_t wanted, uint32_t used);
    void *fallback_user;
    struct nx_quant_stats *stats;
} nx_quant_opts;
typedef struct nx_quant_stats {
    uint64_t n_tensors, n_fallback; /* tensors; those that fell back (on_fallback's calls) */
    uint64_t n_elements, in_bytes, out_bytes;
} nx_quant_stats;
bool nx_quantize_file_ex(const char *in_path, const char *out_path, const nx_quant_mix *mix,
                         const nx_quant_opts *opts, nx_pool *pool, nx_progress_fn progress, void *progress_user,
                         nx_err *err);

/* The type-selection state and rule, exposed for tests: call nx_qstate_init with all tensor
 * names (in processing order), then nx_qstate_choose for each in the same order. */
typedef struct nx_qstate {
    const nx_quant_mix *mix;
    int n_attn_v, i_attn_v;      /* attn_v / attn_qkv tensors: total and seen so far */
    int n_ffn_down, i_ffn_down;  /* total = block_count, like llama.cpp */
    int n_expert;                /* <arch>.expert_count (0 = dense); set after nx_qstate_init */
    bool tied;                   /* no output.weight: token_embd is treated as the output */
    int n_gqa;                   /* n_head / n_head_kv of layer 0 (0 = unknown); set after init */
    const nx_quant_override *overrides; /* set after init (none by default) */
    const regex_t *override_re;         /* their compiled patterns */
    size_t n_overrides;
    bool has_imatrix;                   /* set after init: the imatrix rules apply */
    bool pure;                          /* set after init: nx_quant_opts.pure */
    uint32_t output_type, token_embd_type; /* nx_quant_opts's; NX_QTYPE_NONE after init */
    uint32_t wanted;                    /* out: the last choice before the block-size fallback */
} nx_qstate;

void nx_qstate_init(nx_qstate *s, const nx_quant_mix *mix, const char *const *names, size_t n, uint32_t block_count);
#define NX_QTYPE_NONE UINT32_MAX   /* no type fits the tensor's rows (see 3. above) */
/* n_dims/ne0/cur_type describe the input tensor; returns the output type or NX_QTYPE_NONE. */
uint32_t nx_qstate_choose(nx_qstate *s, const char *name, uint32_t n_dims, uint64_t ne0, uint32_t cur_type);

#endif
