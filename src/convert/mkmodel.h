/* mkmodel.h - synthetic qwen35 / qwen35moe models: real shapes, seeded random weights, a
 * byte-level vocab.
 *
 * Used by `nextn mkmodel` (writes a GGUF that llama.cpp loads) and by the tests (which build
 * the same tensors in memory and bind them with nx_model_bind, no file needed).  Every element
 * is a pure function of (seed, tensor name, element index), so a tensor can be produced in any
 * order, in row chunks, by any number of threads, with identical bytes.
 *
 * Weight scales (sane for a forward pass): matrices and embeddings ~ N(0, 0.02) (an
 * Irwin-Hall approximation), block norms 1 + U(-0.1, 0.1), ssm_norm likewise, ssm_a = -exp(U(0,
 * log 16)) (as HF initialises A), ssm_dt.bias = inverse-softplus of dt ~ logU(1e-3, 1e-1),
 * conv taps U(-1/sqrt(Kc), 1/sqrt(Kc)).
 */
#ifndef NX_MKMODEL_H
#define NX_MKMODEL_H

#include "nextn_internal.h"

/* Special tokens at the end of the vocabulary: <|endoftext|>, <|im_start|>, <|im_end|>. */
#define NX_MK_N_SPECIAL 3

typedef enum nx_mk_kind {
    NX_MK_MATRIX, NX_MK_NORM, NX_MK_SSM_A, NX_MK_DT_BIAS, NX_MK_CONV
} nx_mk_kind;

typedef struct nx_mk_tensor {
    char name[96];
    uint32_t n_dims;
    uint64_t ne[3];          /* ne[0] = row length; ne[1] * ne[2] rows (ne[2] = experts, else 1) */
    nx_mk_kind kind;
    bool keep_f32;           /* 1-D tensors and conv kernels stay F32 like the converter writes them */
} nx_mk_tensor;

typedef struct nx_mk_options {
    const char *preset;      /* tiny, 0.8b, 2b, 4b, 9b; MoE: tiny-moe, 35b-a3b, 122b-a10b */
    uint32_t type;           /* nx_type of matrices */
    uint64_t seed;
    bool mtp;                /* include the MTP block (default true) */
    uint32_t n_vocab;        /* 0 = preset default */
    int tie;                 /* -1 preset default, 0 untied, 1 tied */
    uint32_t n_layers;       /* trunk layers, 0 = preset's (widths and the layer-type rule unchanged) */
    bool fuse_gate_up;       /* MoE: ffn_gate_up_exps instead of ffn_gate_exps + ffn_up_exps */
    nx_progress_fn progress; /* nx_mkmodel_write: after each tensor (i of n, bytes written); may be NULL */
    void *progress_user;
} nx_mk_options;

/* Hyper-parameters of a preset (recurrent[] filled, validated).  *tied = preset's head tying. */
bool nx_mk_hparams(const nx_mk_options *o, nx_hparams *hp, bool *tied, nx_err *err);
/* The tensor list in file order.  *out is malloc'ed; returns the count (or -1 with err). */
int  nx_mk_tensors(const nx_hparams *hp, bool tied, bool fuse_gate_up, nx_mk_tensor **out, nx_err *err);
/* Rows of a tensor (ne[1] * ne[2]). */
static inline int64_t nx_mk_rows(const nx_mk_tensor *t) { return (int64_t)(t->ne[1] * t->ne[2]); }
/* Rows [row0, row0 + nrows) of a tensor as F32 (ne[0] floats per row). */
void nx_mk_fill_rows(const nx_mk_tensor *t, const nx_hparams *hp, uint64_t seed, int64_t row0, int64_t nrows,
                     float *dst);
/* Writes the whole GGUF (keys as llama.cpp's converter writes them, tokenizer included).
 * pool may be NULL (single thread). */
bool nx_mkmodel_write(const nx_mk_options *o, const char *path, nx_pool *pool, nx_err *err);

/* In-memory model for tests: all tensors F32 (or `type` for matrices) in one owned buffer. */
typedef struct nx_mk_memory {
    nx_hparams hp;
    int n;
    nx_mk_tensor *tensors;
    void **data;
    uint32_t *types;
} nx_mk_memory;
bool nx_mk_memory_build(nx_mk_memory *mem, const nx_mk_options *o, nx_err *err);
bool nx_mk_memory_lookup(void *user, const char *name, nx_tensor_info *out); /* nx_tensor_lookup_fn */
void nx_mk_memory_free(nx_mk_memory *mem);

#endif
