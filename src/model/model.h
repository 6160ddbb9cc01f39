/* model.h - Qwen3.5 (`qwen35`, dense) and Qwen3.5-MoE (`qwen35moe`) hyper-parameters and
 * weight views.
 *
 * A model is a set of views into a GGUF mapping: matrices become nx_weight (matmul.h) pointing
 * straight into the mmapped file, so loading costs no copy and the page cache is shared.  Only
 * small 1-D tensors (norm weights, ssm_a, dt bias, conv kernels) are converted to F32 copies
 * when the file stores them in another type; when they are already F32 they are used in place.
 *
 * Two ways to build one:
 *   nx_model_load()      - open a GGUF file, read the qwen35.* keys, bind every tensor;
 *   nx_model_bind()      - given hyper-parameters and a tensor lookup callback (used by tests
 *                          and by mkmodel to build a model from memory without a file).
 * Both validate everything: unknown architecture, missing tensor, wrong shape, unsupported
 * type each give an error naming the key or tensor and the expected/actual values.
 *
 * Layer numbering follows the file: trunk layers 0..L-1, the MTP block is layer L (only
 * nextn_predict_layers == 1 is supported).  qwen35moe differs from qwen35 only in the FFN of
 * every layer (trunk and MTP block): a mixture of experts (nx_moe_weights) instead of one
 * SwiGLU block, and in the expert_* keys.
 */
#ifndef NX_MODEL_H
#define NX_MODEL_H

#include "base/common.h"
#include "gguf/gguf.h"
#include "quant/matmul.h"

#define NX_MAX_LAYERS 256

/* LLAMA_MAX_EXPERTS of llama.cpp: files with more experts do not load there either. */
#define NX_MAX_EXPERTS 512
#define NX_MAX_HEAD_DIM 1024 /* attention key_length limit (buffers of one head are on the stack) */

typedef struct nx_hparams {
    bool moe;                 /* general.architecture qwen35moe: every FFN is a mixture of experts */
    uint32_t n_ctx_train;
    uint32_t n_embd;          /* E */
    uint32_t n_layer_all;     /* block_count = L + n_mtp */
    uint32_t n_layer;         /* L, trunk layers */
    uint32_t n_mtp;           /* nextn_predict_layers (0 or 1) */
    uint32_t n_ff;            /* F (dense FFN width; for qwen35moe only a fallback, may be 0) */
    uint32_t n_expert;        /* qwen35moe: experts per layer (expert_count) */
    uint32_t n_expert_used;   /* qwen35moe: experts routed per token, top-k (expert_used_count) */
    uint32_t n_ff_exp;        /* qwen35moe: expert width (expert_feed_forward_length, else F / k) */
    uint32_t n_ff_shexp;      /* qwen35moe: shared expert width (expert_shared_feed_forward_length, else F) */
    uint32_t n_head;          /* H */
    uint32_t n_head_kv;       /* Hkv */
    uint32_t head_dim;        /* D = key_length = value_length */
    uint32_t n_rot;           /* R, rotary dims (partial) */
    int32_t rope_sections[4];
    float rope_base;
    float eps;                /* every RMSNorm and the GDN L2 norm */
    uint32_t ssm_conv_kernel; /* Kc */
    uint32_t ssm_d_state;     /* dk */
    uint32_t ssm_n_group;     /* Hk, key heads */
    uint32_t ssm_dt_rank;     /* Hv, value heads */
    uint32_t ssm_d_inner;     /* value_dim = Hv * dv */
    uint32_t full_attn_interval;
    uint32_t n_vocab;         /* V = number of tokenizer tokens (= token_embd rows) */
    bool recurrent[NX_MAX_LAYERS]; /* per file layer: Gated DeltaNet (true) or attention */
} nx_hparams;

/* Derived sizes (all from hparams; dv == dk is enforced). */
static inline uint32_t nx_hp_key_dim(const nx_hparams *h)   { return h->ssm_n_group * h->ssm_d_state; }
static inline uint32_t nx_hp_value_dim(const nx_hparams *h) { return h->ssm_d_inner; }
static inline uint32_t nx_hp_conv_dim(const nx_hparams *h)  { return 2 * nx_hp_key_dim(h) + h->ssm_d_inner; }
static inline uint32_t nx_hp_kv_dim(const nx_hparams *h)    { return h->n_head_kv * h->head_dim; }

/* "qwen35moe" or "qwen35": the architecture name and the prefix of every hyper-parameter key. */
static inline const char *nx_hp_arch(const nx_hparams *h)   { return h->moe ? "qwen35moe" : "qwen35"; }

/* Fills the derived fields (recurrent[] from full_attn_interval, n_layer from n_layer_all and
 * n_mtp) and checks every constraint (dk == dv, Hv % Hk == 0, H % Hkv == 0, n_rot even and
 * <= D, limits).  `where` names the source in messages (e.g. the file path). */
bool nx_hparams_finish(nx_hparams *hp, const char *where, nx_err *err);

/* Reads the qwen35.* keys of an open GGUF (llama.cpp's key names) and calls nx_hparams_finish. */
bool nx_hparams_from_gguf(nx_hparams *hp, const nx_gguf *g, nx_err *err);

typedef struct nx_attn_weights {
    nx_weight q;              /* {E, 2*H*D}: per head D query values then D gate values */
    nx_weight k, v;           /* {E, Hkv*D} */
    nx_weight o;              /* {H*D, E} */
    const float *q_norm;      /* [D] */
    const float *k_norm;      /* [D] */
} nx_attn_weights;

typedef struct nx_gdn_weights {
    nx_weight qkv;            /* {E, conv_dim}: [Q | K | V(tiled head order)] */
    nx_weight gate;           /* {E, value_dim}: z */
    nx_weight beta;           /* {E, Hv} */
    nx_weight alpha;          /* {E, Hv} */
    nx_weight out;            /* {value_dim, E} */
    const float *conv1d;      /* [conv_dim][Kc], tap Kc-1 multiplies the current token */
    const float *dt_bias;     /* [Hv] */
    const float *a;           /* [Hv], = -exp(A_log) < 0 */
    const float *norm;        /* [dv], gated RMSNorm weight (no +1) */
} nx_gdn_weights;

/* The mixture-of-experts FFN of a qwen35moe layer (also of its MTP block):
 *   p = softmax(router · f) over all experts; the k largest -> weights p_j / max(sum p_j, 6.1e-5);
 *   moe = sum_j w_j · down_e(silu(gate_e · f) * (up_e · f));
 *   FFN(f) = moe + sigmoid(sh_gate_inp · f) · sh_down(silu(sh_gate · f) * (sh_up · f)).
 * Expert e's matrices are views into the stacked 3-D tensors: its gate rows start at
 * gate.data + e * gate_stride (likewise up and down), so the stacked (ffn_gate_exps +
 * ffn_up_exps) and the fused (ffn_gate_up_exps: per expert n_ff_exp gate rows, then n_ff_exp
 * up rows) layouts differ only in base pointers and strides.  Nothing is copied. */
typedef struct nx_moe_weights {
    nx_weight router;         /* {E, n_expert} ffn_gate_inp */
    nx_weight gate, up;       /* expert 0: {E, n_ff_exp} */
    nx_weight down;           /* expert 0: {n_ff_exp, E} */
    size_t gate_stride, up_stride, down_stride; /* bytes from expert e to expert e + 1 */
    bool fused_gate_up;       /* bound from ffn_gate_up_exps */
    nx_weight sh_gate, sh_up; /* {E, n_ff_shexp} */
    nx_weight sh_down;        /* {n_ff_shexp, E} */
    nx_weight sh_gate_inp;    /* {E, 1}: ffn_gate_inp_shexp, one logit per row */
} nx_moe_weights;

/* Expert e's matrix of a stacked view (w = &moe->gate, &moe->up or &moe->down). */
static inline nx_weight nx_moe_expert(const nx_weight *w, size_t stride, int e) {
    nx_weight x = *w;
    x.data = (const char *)w->data + (size_t)e * stride;
    return x;
}

typedef struct nx_layer {
    bool recurrent;
    bool is_moe;              /* FFN is `moe` below, else the dense ffn_* matrices */
    int cache_index;          /* index among attention layers (KV cache) or GDN layers (state) */
    const float *attn_norm;   /* [E] */
    const float *post_norm;   /* [E] post_attention_norm, pre-FFN */
    nx_attn_weights attn;     /* valid when !recurrent */
    nx_gdn_weights gdn;       /* valid when recurrent */
    nx_weight ffn_gate, ffn_up; /* {E, F} (dense) */
    nx_weight ffn_down;       /* {F, E} (dense) */
    nx_moe_weights moe;       /* valid when moe */
} nx_layer;

/* The MTP / NextN block (GGUF layer L = n_layer: blk.L.nextn.*, llama.cpp graph_mtp).  Kept for the MTP driver; the trunk never uses it.
 * Fallbacks are already resolved: embed -> token_embd, head_norm -> output_norm,
 * head -> trunk LM head. */
typedef struct nx_mtp_weights {
    bool present;
    nx_layer layer;           /* an attention layer (recurrent == false, cache_index 0) */
    nx_weight eh_proj;        /* {2E, E}: input = [enorm(embed) ; hnorm(h)] */
    const float *enorm;       /* [E] */
    const float *hnorm;       /* [E] */
    const float *head_norm;   /* [E] shared_head_norm or output_norm */
    nx_weight embed;          /* {E, V} nextn.embed_tokens or token_embd */
    nx_weight head;           /* {E, V} shared_head_head or the trunk head */
} nx_mtp_weights;

typedef struct nx_model {
    nx_hparams hp;
    nx_gguf *gguf;            /* owned when loaded from a file; NULL for nx_model_bind */
    nx_weight tok_embd;       /* {E, V} */
    const float *output_norm; /* [E] */
    nx_weight output;         /* {E, V}: output.weight, or token_embd when tied */
    bool tied;                /* output.weight absent: head shares token_embd */
    nx_layer *layers;         /* [L] */
    nx_mtp_weights mtp;
    int n_attn_layers, n_gdn_layers; /* trunk layers of each kind */
    float **owned;            /* F32 copies of small tensors stored in other types */
    int n_owned, cap_owned;
    uint64_t weight_bytes;    /* bytes of all bound trunk tensors (for bandwidth figures) */
    uint64_t expert_bytes;    /* of which routed experts (qwen35moe), all experts of all trunk layers */
    uint64_t huge_bytes;      /* bytes of the file mapping with 2 MiB entries, measured at the end of
                                 nx_model_prefault; 0: none, unknown, or not prefaulted / no file */
    bool huge_reread;         /* nx_model_prefault dropped the cached file and read it again */
} nx_model;

/* Trunk bytes one token's forward pass reads when every layer routes to k of n experts: all
 * weights except the routed experts, plus k / n of those (the embedding counted whole, as in
 * weight_bytes). */
static inline uint64_t nx_model_active_bytes(const nx_model *m) {
    if (!m->hp.moe || m->hp.n_expert == 0) return m->weight_bytes;
    return m->weight_bytes - m->expert_bytes + m->expert_bytes / m->hp.n_expert * m->hp.n_expert_used;
}

/* A tensor as the binder sees it: type, dims (fastest first) and data. */
typedef struct nx_tensor_info {
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
    const void *data;
} nx_tensor_info;

/* Looks up a tensor by name; returns false if absent. */
typedef bool (*nx_tensor_lookup_fn)(void *user, const char *name, nx_tensor_info *out);
/* The lookup over an open GGUF (user = const nx_gguf *). */
bool nx_gguf_tensor_lookup(void *gguf, const char *name, nx_tensor_info *out);

/* Binds all tensors.  `where` names the source in error messages.  `want_mtp`: bind the MTP
 * block when the hparams announce one (a missing MTP tensor is then an error). */
bool nx_model_bind(nx_model *m, const nx_hparams *hp, nx_tensor_lookup_fn lookup, void *user,
                   const char *where, bool want_mtp, nx_err *err);

/* Binds only what the MTP head needs: token_embd, output_norm, output (optional, tied
 * otherwise) and the MTP block (layer L).  Trunk tensors may be absent (an "mtp-only" file,
 * token_embd, output_norm, output and blk.L.* only); m->layers stays NULL and the model can only serve as an MTP head. */
bool nx_model_bind_mtp_only(nx_model *m, const nx_hparams *hp, nx_tensor_lookup_fn lookup, void *user,
                            const char *where, nx_err *err);

/* Opens and binds a GGUF file.  On success *out is owned by the caller (nx_model_free). */
bool nx_model_load(nx_model **out, const char *path, bool want_mtp, nx_err *err);
/* nx_model_load in two steps, for a caller that reads the file itself first (with progress):
 * nx_model_open binds without touching the tensor data; nx_model_prefault then maps the data
 * into the page tables (MADV_POPULATE_READ) when the file fits in memory - best effort - and,
 * when huge_reread, re-reads it for 2 MiB pages (nx_map_prefer_huge; nx_model_load does).  It
 * sets m->huge_reread and m->huge_bytes. */
bool nx_model_open(nx_model **out, const char *path, bool want_mtp, nx_err *err);
void nx_model_prefault(nx_model *m, bool huge_reread);
/* The prefault's 2 MiB-page step (model_load.c), exposed for tests.  For a read-only file
 * mapping of `path` at `base` (never anonymous memory: dropping its entries would zero it), size
 * bytes with the tensor data from data_offset, of at least min_bytes: when less than half of the
 * data is mapped with 2 MiB entries, drops the file's cached pages and reads them again through
 * the mapping, if a 4 MiB probe window shows that this brings 2 MiB entries.  Returns whether it
 * re-read the data.  nx_map_huge_bytes: bytes of the mapping containing addr that are mapped
 * with 2 MiB entries (FilePmdMapped in /proc/self/smaps), -1 if unknown. */
bool nx_map_prefer_huge(const void *base, uint64_t size, uint64_t data_offset, const char *path, uint64_t min_bytes);
int64_t nx_map_huge_bytes(const void *addr);
void nx_model_free(nx_model *m);     /* frees a loaded model (and the struct itself) */
void nx_model_release(nx_model *m);  /* frees what nx_model_bind allocated, not the struct */

/* Fingerprint of a model (for sequence-state files, which never restore into another model):
 * FNV-1a over the hyper-parameters, the GGUF tensor table and samples of every tensor's bytes
 * (32 at its start, middle and end). */
uint64_t nx_model_fingerprint(const nx_model *m);

/* One embedding row (any weight type) converted to F32. */
bool nx_embed_row(const nx_weight *emb, int32_t token, float *out, nx_err *err);

#endif
