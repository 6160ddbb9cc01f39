/* model_load.c - qwen35 / qwen35moe hyper-parameters from GGUF keys (as llama.cpp's loader reads them) and loading a model
 * from a GGUF file: the tensors are bound in place inside the mapping (model.c). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "model/model.h"

static bool get_sections(const nx_gguf *g, const char *key, int32_t out[4], nx_err *err) {
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, key);
    if (!kv) return nx_fail(err, "%s: missing required key '%s'", g->path, key);
    if (kv->type == NX_GGUF_ARRAY) {
        if (kv->arr_type == NX_GGUF_STRING || kv->arr_type == NX_GGUF_ARRAY || kv->arr_type == NX_GGUF_FLOAT32 ||
            kv->arr_type == NX_GGUF_FLOAT64 || kv->arr_count == 0 || kv->arr_count > 4)
            return nx_fail(err, "%s: key '%s' must be an integer array of 1..4 elements", g->path, key);
        for (int i = 0; i < 4; i++) out[i] = i < (int)kv->arr_count ? (int32_t)nx_gguf_arr_int(kv, (uint64_t)i) : 0;
        return true;
    }
    int32_t v;
    if (!nx_gguf_get_i32_or(g, key, 0, &v, err)) return false;
    out[0] = v; out[1] = out[2] = out[3] = 0;
    return true;
}

bool nx_hparams_from_gguf(nx_hparams *hp, const nx_gguf *g, nx_err *err) {
    memset(hp, 0, sizeof *hp);
    nx_str arch;
    if (!nx_gguf_get_str(g, "general.architecture", &arch, err)) return false;
    if (nx_str_eq(arch, "qwen35moe")) hp->moe = true;
    else if (!nx_str_eq(arch, "qwen35"))
        return nx_fail(err, "%s: unsupported general.architecture '%.*s' (this engine runs 'qwen35' and "
                       "'qwen35moe')", g->path, (int)NX_MIN(arch.len, 64), arch.ptr);
    const char *a = nx_hp_arch(hp);
    char key[96];
#define KEY(k) (snprintf(key, sizeof key, "%s.%s", a, k), key)
#define U32(k, dst) if (!nx_gguf_get_u32(g, KEY(k), dst, err)) return false
#define U32_OR(k, def, dst) if (!nx_gguf_get_u32_or(g, KEY(k), def, dst, err)) return false
    U32("context_length", &hp->n_ctx_train);
    U32("embedding_length", &hp->n_embd);
    U32("block_count", &hp->n_layer_all);
    /* the dense FFN width; for qwen35moe only the fallback of the expert widths (llama.cpp reads
     * it as optional for both, the dense graph then needs it) */
    if (hp->moe) {
        U32_OR("feed_forward_length", 0, &hp->n_ff);
    } else {
        U32("feed_forward_length", &hp->n_ff);
    }
    U32("attention.head_count", &hp->n_head);
    U32_OR("attention.head_count_kv", hp->n_head, &hp->n_head_kv);
    U32_OR("attention.key_length", hp->n_head ? hp->n_embd / hp->n_head : 0, &hp->head_dim);
    uint32_t vlen;
    U32_OR("attention.value_length", hp->head_dim, &vlen);
    if (vlen != hp->head_dim)
        return nx_fail(err, "%s: %s.attention.value_length = %u differs from key_length = %u", g->path, a, vlen,
                       hp->head_dim);
    U32_OR("rope.dimension_count", hp->head_dim, &hp->n_rot);
    U32("ssm.conv_kernel", &hp->ssm_conv_kernel);
    U32("ssm.state_size", &hp->ssm_d_state);
    U32("ssm.group_count", &hp->ssm_n_group);
    U32("ssm.time_step_rank", &hp->ssm_dt_rank);
    U32("ssm.inner_size", &hp->ssm_d_inner);
    U32_OR("full_attention_interval", 4, &hp->full_attn_interval);
    U32_OR("nextn_predict_layers", 0, &hp->n_mtp);
    if (hp->moe) {
        /* llama.cpp: n_ff_exp = expert_feed_forward_length or F / k; n_ff_shexp = its key or F;
         * gating is softmax -> top-k -> renormalise whatever expert_gating_func / expert_weights_*
         * say (not read for this architecture); grouped routing would be applied, so refuse it */
        uint32_t ff_exp, ff_sh, groups;
        U32_OR("expert_count", 0, &hp->n_expert);
        U32_OR("expert_used_count", 0, &hp->n_expert_used);
        U32_OR("expert_feed_forward_length", 0, &ff_exp);
        U32_OR("expert_shared_feed_forward_length", 0, &ff_sh);
        U32_OR("expert_group_count", 0, &groups);
        if (groups > 1)
            return nx_fail(err, "%s: %s.expert_group_count = %u: grouped expert routing is not supported", g->path,
                           a, groups);
        hp->n_ff_exp = ff_exp ? ff_exp : hp->n_expert_used ? hp->n_ff / hp->n_expert_used : 0;
        hp->n_ff_shexp = ff_sh ? ff_sh : hp->n_ff;
    }
#undef U32
#undef U32_OR
    if (!nx_gguf_get_f32(g, KEY("attention.layer_norm_rms_epsilon"), &hp->eps, err)) return false;
    if (!nx_gguf_get_f32_or(g, KEY("rope.freq_base"), 10000.0f, &hp->rope_base, err)) return false;
    if (!get_sections(g, KEY("rope.dimension_sections"), hp->rope_sections, err)) return false;

    const nx_gguf_kv *toks = nx_gguf_find_kv(g, "tokenizer.ggml.tokens");
    if (toks) {
        if (toks->type != NX_GGUF_ARRAY || toks->arr_type != NX_GGUF_STRING)
            return nx_fail(err, "%s: tokenizer.ggml.tokens must be an array of strings", g->path);
        if (toks->arr_count > INT32_MAX)
            return nx_fail(err, "%s: tokenizer.ggml.tokens has %llu entries (too many)", g->path,
                           (unsigned long long)toks->arr_count);
        hp->n_vocab = (uint32_t)toks->arr_count;
    } else {
        const nx_gguf_tensor *te = nx_gguf_find_tensor(g, "token_embd.weight");
        if (te && te->n_dims == 2 && te->ne[1] <= INT32_MAX) hp->n_vocab = (uint32_t)te->ne[1];
    }

    if (hp->n_layer_all == 0 || hp->n_layer_all > NX_MAX_LAYERS)
        return nx_fail(err, "%s: %s.block_count = %u (must be 1..%d)", g->path, a, hp->n_layer_all, NX_MAX_LAYERS);
    if (hp->n_mtp >= hp->n_layer_all)
        return nx_fail(err, "%s: %s.nextn_predict_layers = %u must be < block_count = %u", g->path, a, hp->n_mtp,
                       hp->n_layer_all);
    uint32_t L = hp->n_layer_all - hp->n_mtp;
    const nx_gguf_kv *rl = nx_gguf_find_kv(g, KEY("attention.recurrent_layers"));
    if (rl) {
        if (rl->type != NX_GGUF_ARRAY || rl->arr_count != hp->n_layer_all || rl->arr_type == NX_GGUF_STRING ||
            rl->arr_type == NX_GGUF_ARRAY || rl->arr_type == NX_GGUF_FLOAT32 || rl->arr_type == NX_GGUF_FLOAT64)
            return nx_fail(err, "%s: %s.attention.recurrent_layers must be a bool/integer array of block_count "
                           "= %u elements", g->path, a, hp->n_layer_all);
        for (uint32_t i = 0; i < hp->n_layer_all; i++)
            hp->recurrent[i] = i < L && nx_gguf_arr_int(rl, i) != 0;
    } else {
        if (hp->full_attn_interval == 0)
            return nx_fail(err, "%s: %s.full_attention_interval must be > 0", g->path, a);
        for (uint32_t i = 0; i < hp->n_layer_all; i++)
            hp->recurrent[i] = i < L && (i + 1) % hp->full_attn_interval != 0;
    }
#undef KEY
    return nx_hparams_finish(hp, g->path, err);
}

bool nx_gguf_tensor_lookup(void *gguf, const char *name, nx_tensor_info *out) {
    const nx_gguf_tensor *t = nx_gguf_find_tensor((const nx_gguf *)gguf, name);
    if (!t) return false;
    out->type = t->type;
    out->n_dims = t->n_dims;
    for (int i = 0; i < 4; i++) out->ne[i] = t->ne[i];
    out->data = t->data;
    return true;
}

static void populate(uintptr_t a, size_t n) {
#ifdef MADV_POPULATE_READ
    if (madvise((void *)a, n, MADV_POPULATE_READ) == 0) return;
#endif
    madvise((void *)a, n, MADV_WILLNEED);
}

/* ---- 2 MiB pages for the weights ----------------------------------------------------------
 * The kernel maps a cached file with 2 MiB entries only where its page cache holds 2 MiB folios
 * and the address is congruent to the file offset modulo 2 MiB.  A file the kernel reads in for
 * a mapping comes in as such folios on current kernels (MADV_HUGEPAGE asks for it where mapped
 * readahead needs the hint); a file read in by read(2) (`cat FILE`) mostly does not, and stays
 * so while it is cached.  Reading weights through 4 KiB entries made decode 1.5-18x slower on
 * the VM of docs/notes/page-cache-page-size.md, in llama.cpp as well.  So after
 * the prefault, when less than half of a large file's data is mapped with 2 MiB entries, the
 * cached pages are dropped and read again through the mapping: first a 4 MiB probe window, then
 * the rest only if the probe came back 2 MiB-mapped (a kernel or file system without large
 * folios would re-read for nothing).  Pages that other processes map are not dropped; the
 * contents never change (a read-only mapping of the same file).  The caller can switch the
 * re-read off (nextn_model_params.no_huge_reread); the model records whether it re-read and how
 * many bytes ended up 2 MiB-mapped (nx_model.huge_reread, huge_bytes: nextn_model_info). */
#define HUGE_PAGE ((uintptr_t)2 << 20)
#define HUGE_PROBE ((uintptr_t)4 << 20)
/* Files below this size are not worth a re-read. */
#define HUGE_REREAD_MIN ((uint64_t)64 << 20)

int64_t nx_map_huge_bytes(const void *addr) {
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f) return -1;
    char line[4096];
    bool in = false;
    int64_t bytes = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b, kb;
        char c;
        if (sscanf(line, "%lx-%lx %c", &a, &b, &c) == 3) {
            in = (uintptr_t)addr >= a && (uintptr_t)addr < b;
        } else if (in && sscanf(line, "FilePmdMapped: %lu kB", &kb) == 1) {
            bytes = (int64_t)kb * 1024;
            break;
        }
    }
    fclose(f);
    return bytes;
}

/* Drops the cached pages of [a, a + n) (the mapping's own entries first: a mapped page is not
 * dropped) and reads them again through the mapping. */
static void reread(const void *base, const char *path, uintptr_t a, size_t n) {
    madvise((void *)a, n, MADV_DONTNEED);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        posix_fadvise(fd, (off_t)(a - (uintptr_t)base), (off_t)n, POSIX_FADV_DONTNEED);
        close(fd);
    }
    populate(a, n);
}

bool nx_map_prefer_huge(const void *base, uint64_t size, uint64_t data_offset, const char *path, uint64_t min_bytes) {
    const uintptr_t b = (uintptr_t)base, lo = (b + data_offset + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    const uintptr_t hi = (b + size) & ~(HUGE_PAGE - 1);
    if (size < min_bytes || (b & (HUGE_PAGE - 1)) != 0 || hi < lo + HUGE_PROBE) return false;
    const int64_t before = nx_map_huge_bytes(base);
    if (before < 0 || (uint64_t)before >= (hi - lo) / 2) return false;
    reread(base, path, lo, HUGE_PROBE);
    if (nx_map_huge_bytes(base) <= before) return false;
    reread(base, path, lo + HUGE_PROBE, hi - lo - HUGE_PROBE);
    return true;
}

/* Maps the tensor data into the page tables before the first forward pass, as llama.cpp's
 * loader does (MAP_POPULATE): otherwise every first touch of a weight page faults, and a mixture
 * of experts keeps touching experts for the first time over many tokens; in 2 MiB pages where
 * the kernel can (above; nx_gguf_open advised MADV_HUGEPAGE on its mapping before the first read;
 * the re-read only when `reread`).  Only when the file fits comfortably
 * in memory; best effort (no error: the pages still fault in on demand).  Then measures once how
 * much of the file is mapped with 2 MiB entries. */
void nx_model_prefault(nx_model *m, bool reread) {
    const nx_gguf *g = m->gguf;
    m->huge_reread = false;
    m->huge_bytes = 0;
    if (!g) return;
    const long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages > 0 && psz > 0 && g->size <= (uint64_t)pages * (uint64_t)psz / 2) {
        const uintptr_t a = (uintptr_t)g->base + g->data_offset, lo = a & ~(uintptr_t)(psz - 1);
        populate(lo, (size_t)((uintptr_t)g->base + g->size - lo));
        /* only on our own file mapping: dropping the entries of a caller's buffer would zero it */
        if (g->owns_mapping && reread)
            m->huge_reread = nx_map_prefer_huge(g->base, g->size, g->data_offset, g->path, HUGE_REREAD_MIN);
    }
    if (g->owns_mapping) {
        const int64_t huge = nx_map_huge_bytes(g->base);
        m->huge_bytes = huge > 0 ? (uint64_t)huge : 0;
    }
}

bool nx_model_load(nx_model **out, const char *path, bool want_mtp, nx_err *err) {
    if (!nx_model_open(out, path, want_mtp, err)) return false;
    nx_model_prefault(*out, true);
    return true;
}

bool nx_model_open(nx_model **out, const char *path, bool want_mtp, nx_err *err) {
    *out = NULL;
    nx_gguf *g = NULL;
    if (!nx_gguf_open(&g, path, err)) return false;
    nx_hparams hp;
    nx_model *m = nx_calloc(1, sizeof *m, "model", err);
    if (!m || !nx_hparams_from_gguf(&hp, g, err) || !nx_model_bind(m, &hp, nx_gguf_tensor_lookup, g, path, want_mtp, err)) {
        free(m);
        nx_gguf_close(g);
        return false;
    }
    m->gguf = g;
    *out = m;
    return true;
}


void nx_model_free(nx_model *m) {
    if (!m) return;
    nx_model_release(m);
    nx_gguf_close(m->gguf);
    free(m);
}
