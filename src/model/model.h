/* model.h - Qwen3.5 (`qwen35`) hyper-parameters and weight views.
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
 * nextn_predict_layers == 1 is supported).  Reference: docs/qwen35-reference.md §1, §2.
 */
#ifndef NX_MODEL_H
#define NX_MODEL_H

#include "base/common.h"
#include "gguf/gguf.h"
#include "quant/matmul.h"

#define NX_MAX_LAYERS 256

typedef struct nx_hparams {
    uint32_t n_ctx_train;
    uint32_t n_embd;          /* E */
    uint32_t n_layer_all;     /* block_count = L + n_mtp */
    uint32_t n_layer;         /* L, trunk layers */
    uint32_t n_mtp;           /* nextn_predict_layers (0 or 1) */
    uint32_t n_ff;            /* F */
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

/* Fills the derived fields (recurrent[] from full_attn_interval, n_layer from n_layer_all and
 * n_mtp) and checks every constraint (dk == dv, Hv % Hk == 0, H % Hkv == 0, n_rot even and
 * <= D, limits).  `where` names the source in messages (e.g. the file path). */
bool nx_hparams_finish(nx_hparams *hp, const char *where, nx_err *err);

/* Reads the qwen35.* keys of an open GGUF (reference §1) and calls nx_hparams_finish. */
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

typedef struct nx_layer {
    bool recurrent;
    int cache_index;          /* index among attention layers (KV cache) or GDN layers (state) */
    const float *attn_norm;   /* [E] */
    const float *post_norm;   /* [E] post_attention_norm, pre-FFN */
    nx_attn_weights attn;     /* valid when !recurrent */
    nx_gdn_weights gdn;       /* valid when recurrent */
    nx_weight ffn_gate, ffn_up; /* {E, F} */
    nx_weight ffn_down;       /* {F, E} */
} nx_layer;

/* The MTP / NextN block (reference §2.6, §7).  Kept for the MTP driver; the trunk never uses it.
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
} nx_model;

/* A tensor as the binder sees it: type, dims (fastest first) and data. */
typedef struct nx_tensor_info {
    uint32_t type;
    uint32_t n_dims;
    uint64_t ne[4];
    const void *data;
} nx_tensor_info;

/* Looks up a tensor by name; returns false if absent. */
typedef bool (*nx_tensor_lookup_fn)(void *user, const char *name, nx_tensor_info *out);

/* Binds all tensors.  `where` names the source in error messages.  `want_mtp`: bind the MTP
 * block when the hparams announce one (a missing MTP tensor is then an error). */
bool nx_model_bind(nx_model *m, const nx_hparams *hp, nx_tensor_lookup_fn lookup, void *user,
                   const char *where, bool want_mtp, nx_err *err);

/* Binds only what the MTP head needs: token_embd, output_norm, output (optional, tied
 * otherwise) and the MTP block (layer L).  Trunk tensors may be absent (an "mtp-only" file,
 * reference §2.8); m->layers stays NULL and the model can only serve as an MTP head. */
bool nx_model_bind_mtp_only(nx_model *m, const nx_hparams *hp, nx_tensor_lookup_fn lookup, void *user,
                            const char *where, nx_err *err);

/* Opens and binds a GGUF file.  On success *out is owned by the caller (nx_model_free). */
bool nx_model_load(nx_model **out, const char *path, bool want_mtp, nx_err *err);
void nx_model_free(nx_model *m);     /* frees a loaded model (and the struct itself) */
void nx_model_release(nx_model *m);  /* frees what nx_model_bind allocated, not the struct */

/* One embedding row (any weight type) converted to F32. */
bool nx_embed_row(const nx_weight *emb, int32_t token, float *out, nx_err *err);

#endif
