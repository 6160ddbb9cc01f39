/* mkmodel_write.c - the synthetic model as a GGUF file: qwen35 / qwen35moe keys exactly as llama.cpp's
 * converter writes them, a byte-level BPE vocabulary, and tensors streamed through the
 * writer's fill callback (memory ~ one tensor; rows generated and quantized in parallel). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn_internal.h"
#include "convert/llama_ftype.h"
#include "convert/mkmodel.h"

static const char *const special_tokens[NX_MK_N_SPECIAL] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
#define N_SPECIAL NX_MK_N_SPECIAL
#define N_PRINT 95 /* space + printable ASCII 33..126 */

/* ---- the GGUF file ------------------------------------------------------------------------- */

/* GPT-2 byte-level alphabet: byte b is shown as the unicode code point byte_cp(b). */
static uint32_t byte_cp(int b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) return (uint32_t)b;
    int n = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) n++;
    return 256u + (uint32_t)n;
}

static int put_utf8(char *dst, uint32_t cp) {
    if (cp < 0x80) { dst[0] = (char)cp; return 1; }
    dst[0] = (char)(0xC0 | (cp >> 6));
    dst[1] = (char)(0x80 | (cp & 0x3F));
    return 2; /* code points here are < 0x800 */
}

/* printable alphabet used for merges: space (shown as 'Ġ') then ASCII 33..126 */
static int print_byte(int i) { return i == 0 ? ' ' : 32 + i; }

typedef struct vocab {
    char **tokens;
    char **merges;
    int32_t *types;
    uint32_t n_tokens, n_merges;
    char *pool;
} vocab;

static void vocab_free(vocab *v) {
    free(v->tokens);
    free(v->merges);
    free(v->types);
    free(v->pool);
}

/* 256 byte tokens, then merged tokens of 2 and 3 printable characters in rank order, then the
 * special tokens.  Every merge "a b" joins two existing tokens into an existing token. */
static bool vocab_build(vocab *v, uint32_t n_vocab, nx_err *err) {
    memset(v, 0, sizeof *v);
    uint32_t n_merge = n_vocab - 256 - N_SPECIAL;
    v->n_tokens = n_vocab;
    v->n_merges = n_merge;
    v->tokens = nx_calloc(n_vocab, sizeof *v->tokens, "vocabulary", err);
    v->merges = nx_calloc(n_merge ? n_merge : 1, sizeof *v->merges, "merges", err);
    v->types = nx_calloc(n_vocab, sizeof *v->types, "token types", err);
    /* each token <= 3 code points of <= 2 bytes + NUL; each merge <= 6 + space + NUL */
    v->pool = nx_malloc((size_t)n_vocab * 8 + (size_t)n_merge * 16 + 64, "vocabulary strings", err);
    if (!v->tokens || !v->merges || !v->types || !v->pool) {
        vocab_free(v);
        return false;
    }
    char *p = v->pool;
    char sym[95][3];
    for (int i = 0; i < N_PRINT; i++) {
        int n = put_utf8(sym[i], byte_cp(print_byte(i)));
        sym[i][n] = 0;
    }
    uint32_t id = 0;
    for (int b = 0; b < 256; b++) {
        v->tokens[id] = p;
        p += put_utf8(p, byte_cp(b));
        *p++ = 0;
        v->types[id++] = 1; /* normal */
    }
    for (uint32_t m = 0; m < n_merge; m++) {
        char left[8];
        int right;
        if (m < N_PRINT * N_PRINT) {
            snprintf(left, sizeof left, "%s", sym[m / N_PRINT]);
            right = (int)(m % N_PRINT);
        } else {
            uint32_t k = m - N_PRINT * N_PRINT, pair = k / N_PRINT;
            snprintf(left, sizeof left, "%s%s", sym[pair / N_PRINT], sym[pair % N_PRINT]);
            right = (int)(k % N_PRINT);
        }
        v->merges[m] = p;
        p += sprintf(p, "%s %s", left, sym[right]) + 1;
        v->tokens[id] = p;
        p += sprintf(p, "%s%s", left, sym[right]) + 1;
        v->types[id++] = 1;
    }
    for (int s = 0; s < N_SPECIAL; s++) {
        v->tokens[id] = (char *)special_tokens[s];
        v->types[id++] = 3; /* control */
    }
    return true;
}

typedef struct fill_job {
    const nx_mk_tensor *t;
    const nx_hparams *hp;
    uint64_t seed;
    uint32_t type;
    size_t row_bytes;
    nx_pool *pool;
    uint8_t *dst;
    float *rowbuf;     /* [n_threads][ne0] */
    const nx_mk_options *o;
    uint64_t index, n; /* progress: tensor index + 1 of n */
    uint64_t *done, total;
} fill_job;

static void fill_task(void *p, int ith, int nth) {
    fill_job *j = p;
    const int64_t n0 = (int64_t)j->t->ne[0], n1 = nx_mk_rows(j->t);
    const int64_t per = (n1 + nth - 1) / nth, r0 = NX_MIN(n1, per * ith), r1 = NX_MIN(n1, r0 + per);
    const nx_type_traits *tt = nx_type_get(j->type);
    float *buf = j->rowbuf + (size_t)ith * (size_t)n0;
    for (int64_t r = r0; r < r1; r++) {
        nx_mk_fill_rows(j->t, j->hp, j->seed, r, 1, buf);
        tt->from_float(buf, j->dst + (size_t)r * j->row_bytes, n0);
    }
}

static bool fill_tensor(void *user, void *dst, uint64_t nbytes, nx_err *err) {
    fill_job *j = user;
    if (nbytes != j->row_bytes * (uint64_t)nx_mk_rows(j->t))
        return nx_fail(err, "mkmodel: tensor '%s' size mismatch (%llu bytes asked)", j->t->name,
                       (unsigned long long)nbytes);
    j->dst = dst;
    int nth = j->pool ? nx_pool_size(j->pool) : 1;
    j->rowbuf = nx_malloc((size_t)nth * j->t->ne[0] * sizeof(float), "mkmodel row buffer", err);
    if (!j->rowbuf) return false;
    if (j->pool) nx_pool_run(j->pool, fill_task, j);
    else fill_task(j, 0, 1);
    free(j->rowbuf);
    j->rowbuf = NULL;
    *j->done += nbytes;
    if (j->o->progress) {
        nx_progress p = {j->index, j->n, *j->done, j->total, j->t->name, NULL};
        j->o->progress(j->o->progress_user, &p);
    }
    return true;
}

bool nx_mkmodel_write(const nx_mk_options *o, const char *path, nx_pool *pool, nx_err *err) {
    nx_hparams hp;
    bool tied;
    if (!nx_mk_hparams(o, &hp, &tied, err)) return false;
    const nx_type_traits *mt = nx_type_get(o->type);
    if (!mt || !mt->from_float) return nx_fail(err, "mkmodel: cannot produce weights of type %s", nx_type_name(o->type));
    nx_mk_tensor *ts = NULL;
    int n = nx_mk_tensors(&hp, tied, o->fuse_gate_up, &ts, err);
    if (n < 0) return false;
    fill_job *jobs = nx_calloc((size_t)n, sizeof *jobs, "mkmodel jobs", err);
    nx_gguf_writer *w = jobs ? nx_gguf_writer_new(err) : NULL;
    vocab voc = {0};
    bool ok = false;
    if (!w || !vocab_build(&voc, hp.n_vocab, err)) goto done;

    char name[96];
    snprintf(name, sizeof name, "nextn synthetic %s %s seed %llu", nx_hp_arch(&hp), o->preset,
             (unsigned long long)o->seed);
    const int32_t sections[4] = {hp.rope_sections[0], hp.rope_sections[1], hp.rope_sections[2], hp.rope_sections[3]};
    /* keys in the order llama.cpp's converter writes them: the generic text-model keys (expert
     * counts after the norm epsilon), then the MoE widths, the MTP count, the GDN keys */
    const char *arch = nx_hp_arch(&hp);
    char key[96];
#define K(k) (snprintf(key, sizeof key, "%s.%s", arch, k), key)
#define OK(x) if (!(x)) goto done
    OK(nx_gguf_add_str(w, "general.architecture", arch, err));
    OK(nx_gguf_add_str(w, "general.type", "model", err));
    OK(nx_gguf_add_str(w, "general.name", name, err));
    OK(nx_gguf_add_u32(w, K("block_count"), hp.n_layer_all, err));
    OK(nx_gguf_add_u32(w, K("context_length"), hp.n_ctx_train, err));
    OK(nx_gguf_add_u32(w, K("embedding_length"), hp.n_embd, err));
    if (!hp.moe) OK(nx_gguf_add_u32(w, K("feed_forward_length"), hp.n_ff, err));
    OK(nx_gguf_add_u32(w, K("attention.head_count"), hp.n_head, err));
    OK(nx_gguf_add_u32(w, K("attention.head_count_kv"), hp.n_head_kv, err));
    OK(nx_gguf_add_f32(w, K("rope.freq_base"), hp.rope_base, err));
    OK(nx_gguf_add_f32(w, K("attention.layer_norm_rms_epsilon"), hp.eps, err));
    if (hp.moe) {
        OK(nx_gguf_add_u32(w, K("expert_count"), hp.n_expert, err));
        OK(nx_gguf_add_u32(w, K("expert_used_count"), hp.n_expert_used, err));
    }
    OK(nx_gguf_add_u32(w, K("attention.key_length"), hp.head_dim, err));
    OK(nx_gguf_add_u32(w, K("attention.value_length"), hp.head_dim, err));
    OK(nx_gguf_add_u32(w, "general.file_type", nx_llama_ftype_of(o->type), err));
    if (hp.moe) {
        OK(nx_gguf_add_u32(w, K("expert_feed_forward_length"), hp.n_ff_exp, err));
        OK(nx_gguf_add_u32(w, K("expert_shared_feed_forward_length"), hp.n_ff_shexp, err));
    }
    if (hp.n_mtp) OK(nx_gguf_add_u32(w, K("nextn_predict_layers"), hp.n_mtp, err));
    OK(nx_gguf_add_u32(w, K("ssm.conv_kernel"), hp.ssm_conv_kernel, err));
    OK(nx_gguf_add_u32(w, K("ssm.state_size"), hp.ssm_d_state, err));
    OK(nx_gguf_add_u32(w, K("ssm.group_count"), hp.ssm_n_group, err));
    OK(nx_gguf_add_u32(w, K("ssm.time_step_rank"), hp.ssm_dt_rank, err));
    OK(nx_gguf_add_u32(w, K("ssm.inner_size"), hp.ssm_d_inner, err));
    OK(nx_gguf_add_u32(w, K("full_attention_interval"), hp.full_attn_interval, err));
    OK(nx_gguf_add_u32(w, K("rope.dimension_count"), hp.n_rot, err));
    OK(nx_gguf_add_arr(w, K("rope.dimension_sections"), NX_GGUF_INT32, sections, 4, err));
#undef K
    OK(nx_gguf_add_u32(w, "general.quantization_version", 2, err));
    OK(nx_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", err));
    OK(nx_gguf_add_str(w, "tokenizer.ggml.pre", "qwen2", err));
    OK(nx_gguf_add_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)voc.tokens, voc.n_tokens, err));
    OK(nx_gguf_add_arr(w, "tokenizer.ggml.token_type", NX_GGUF_INT32, voc.types, voc.n_tokens, err));
    OK(nx_gguf_add_arr_str(w, "tokenizer.ggml.merges", (const char *const *)voc.merges, voc.n_merges, err));
    const uint32_t eot = hp.n_vocab - N_SPECIAL; /* <|endoftext|> */
    OK(nx_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", eot + 2, err));   /* <|im_end|> like Qwen chat models */
    OK(nx_gguf_add_u32(w, "tokenizer.ggml.padding_token_id", eot, err));
    OK(nx_gguf_add_u32(w, "tokenizer.ggml.bos_token_id", eot, err));
    OK(nx_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", false, err));

    uint64_t done_bytes = 0, total_bytes = 0;
    for (int i = 0; i < n; i++) {
        fill_job *j = &jobs[i];
        j->t = &ts[i];
        j->hp = &hp;
        j->seed = o->seed;
        j->type = ts[i].keep_f32 ? NX_TYPE_F32 : o->type;
        j->pool = pool;
        j->o = o;
        j->index = (uint64_t)i + 1;
        j->n = (uint64_t)n;
        j->done = &done_bytes;
        if (!nx_row_size(j->type, (int64_t)ts[i].ne[0], &j->row_bytes, err)) {
            nx_fail_prefix(err, "mkmodel: tensor '%s'", ts[i].name);
            goto done;
        }
        total_bytes += j->row_bytes * (uint64_t)nx_mk_rows(&ts[i]);
        OK(nx_gguf_add_tensor_fn(w, ts[i].name, j->type, ts[i].n_dims, ts[i].ne, fill_tensor, j, err));
    }
    for (int i = 0; i < n; i++) jobs[i].total = total_bytes;
    OK(nx_gguf_writer_write(w, path, err));
#undef OK
    ok = true;
done:
    vocab_free(&voc);
    nx_gguf_writer_free(w);
    free(jobs);
    free(ts);
    return ok;
}
