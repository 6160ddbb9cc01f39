/* convert.h - Hugging Face Qwen3.5 checkpoint (safetensors + config.json + tokenizer.json)
 * -> GGUF, writing what llama.cpp's convert_hf_to_gguf.py writes for arch `qwen35`
 * (docs/convert.md lists every key, tensor and transformation, and the known differences).
 *
 * Transformations (all done in F32 on the fly, exactly as llama.cpp's converter does them):
 *   - every tensor whose HF name ends in "norm.weight", except linear_attn.norm.weight: + 1
 *     (Qwen3.5's zero-centred RMSNorm becomes a plain weight);
 *   - linear_attn.A_log -> ssm_a = -exp(A_log);
 *   - linear_attn.conv1d.weight [C, 1, K] -> squeezed {K, C};
 *   - when linear_num_key_heads != linear_num_value_heads: value heads are permuted from HF's
 *     grouped order to ggml's tiled order in in_proj_qkv (V rows), in_proj_z, in_proj_a/b,
 *     A_log, dt_bias, conv1d (V channels) and out_proj (columns);
 *   - mtp.* -> block L = num_hidden_layers (mtp.fc -> nextn.eh_proj, pre_fc_norm_embedding ->
 *     nextn.enorm, pre_fc_norm_hidden -> nextn.hnorm, mtp.norm -> nextn.shared_head_norm,
 *     mtp.layers.K.* -> blk.{L+K}.*);
 *   - F16 sources keep F16 precision through the value transformations (llama.cpp computes
 *     them in the source dtype for F16; BF16 is upcast to F32 first).
 * Output types: 1-D tensors, *_norm.weight, ssm_conv1d and non-".weight" tensors are F32;
 * everything else gets the requested type; Q8_0 falls back to F16 for rows not a multiple of 32.
 *
 * Streaming: tensors are produced row-chunk by row-chunk from the mmapped safetensors inside the
 * GGUF writer's fill callback, so memory is about one output tensor plus a small scratch buffer.
 */
#ifndef NX_CONVERT_H
#define NX_CONVERT_H

#include "nextn_internal.h"

typedef enum nx_convert_mtp {
    NX_CONVERT_MTP_EMBED = 0,   /* default: trunk + MTP block in one file (if the checkpoint has one) */
    NX_CONVERT_MTP_ONLY,        /* only the MTP block + token_embd / output_norm / output */
    NX_CONVERT_MTP_DROP,        /* trunk only: no MTP tensors, no nextn_predict_layers */
} nx_convert_mtp;


typedef struct nx_convert_opts {
    uint32_t out_type;                  /* NX_TYPE_F32, NX_TYPE_F16, NX_TYPE_BF16 or NX_TYPE_Q8_0 */
    nx_convert_mtp mtp;
    const char *name;                   /* general.name; NULL = the folder name title-cased as llama.cpp does */
    bool fuse_gate_up_exps;             /* MoE: one ffn_gate_up_exps per layer instead of ffn_gate_exps +
                                         * ffn_up_exps (llama.cpp's --fuse-gate-up-exps) */
    nx_progress_fn progress;            /* may be NULL; after every chunk of tensor data: tensor i of n
                                         * (GGUF name), source bytes done of total */
    void *progress_user;
} nx_convert_opts;

/* Converts the checkpoint folder `hf_dir` into `out_path` (written through a temporary file and
 * renamed into place; an existing file is replaced - the CLI asks for --force first). */
bool nx_convert_hf(const char *hf_dir, const char *out_path, const nx_convert_opts *opts, nx_err *err);

#endif
