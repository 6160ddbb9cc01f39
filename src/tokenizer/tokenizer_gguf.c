/* tokenizer_gguf.c - builds a tokenizer from the tokenizer.ggml.* keys of an open GGUF. */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

static bool get_id(const nx_gguf *g, const char *key, int32_t *out, nx_err *err) {
    uint32_t v;
    if (!nx_gguf_find_kv(g, key)) {
        *out = -1;
        return true;
    }
    if (!nx_gguf_get_u32(g, key, &v, err)) return false;
    if (v > INT32_MAX) return nx_fail(err, "%s: %s = %u is out of range", g->path, key, v);
    *out = (int32_t)v;
    return true;
}

bool nx_tokenizer_from_gguf(nx_tokenizer **out, const nx_gguf *g, nx_err *err) {
    *out = NULL;
    nx_str model, pre;
    if (!nx_gguf_get_str(g, "tokenizer.ggml.model", &model, err)) return false;
    if (!nx_str_eq(model, "gpt2"))
        return nx_fail(err, "%s: tokenizer.ggml.model is '%.*s'; only 'gpt2' (byte-level BPE) is supported", g->path,
                       (int)NX_MIN(model.len, 64), model.ptr);
    if (!nx_gguf_get_str(g, "tokenizer.ggml.pre", &pre, err)) return false;
    char pre_name[64];
    if (pre.len >= sizeof pre_name)
        return nx_fail(err, "%s: tokenizer.ggml.pre is %llu bytes long", g->path, (unsigned long long)pre.len);
    memcpy(pre_name, pre.ptr, pre.len);
    pre_name[pre.len] = 0;

    const nx_gguf_kv *tokens, *merges, *types = NULL;
    if (!nx_gguf_get_arr(g, "tokenizer.ggml.tokens", NX_GGUF_STRING, &tokens, err)) return false;
    if (!nx_gguf_find_kv(g, "tokenizer.ggml.merges"))
        return nx_fail(err, "%s: tokenizer.ggml.merges is missing (a BPE vocabulary needs merges)", g->path);
    if (!nx_gguf_get_arr(g, "tokenizer.ggml.merges", NX_GGUF_STRING, &merges, err)) return false;
    if (nx_gguf_find_kv(g, "tokenizer.ggml.token_type") &&
        !nx_gguf_get_arr(g, "tokenizer.ggml.token_type", NX_GGUF_INT32, &types, err))
        return false;
    if (tokens->arr_count == 0 || tokens->arr_count > INT32_MAX / 2)
        return nx_fail(err, "%s: tokenizer.ggml.tokens has %llu entries", g->path, (unsigned long long)tokens->arr_count);
    if (merges->arr_count > UINT32_MAX)
        return nx_fail(err, "%s: tokenizer.ggml.merges has %llu entries", g->path, (unsigned long long)merges->arr_count);
    if (types && types->arr_count != tokens->arr_count)
        return nx_fail(err, "%s: tokenizer.ggml.token_type has %llu entries but tokenizer.ggml.tokens has %llu", g->path,
                       (unsigned long long)types->arr_count, (unsigned long long)tokens->arr_count);

    nx_vocab_desc d;
    nx_vocab_desc_init(&d);
    d.name = g->path;
    d.pre = pre_name;
    d.n_tokens = (uint32_t)tokens->arr_count;
    d.n_merges = (uint32_t)merges->arr_count;
    nx_str *tok = nx_malloc((size_t)d.n_tokens * sizeof *tok, "token list", err);
    nx_str *mer = nx_malloc(((size_t)d.n_merges + 1) * sizeof *mer, "merge list", err);
    int32_t *typ = types ? nx_malloc((size_t)d.n_tokens * sizeof *typ, "token types", err) : NULL;
    bool ok = tok && mer && (!types || typ);
    for (uint32_t i = 0; ok && i < d.n_tokens; i++) tok[i] = nx_gguf_arr_str(tokens, i);
    for (uint32_t i = 0; ok && i < d.n_merges; i++) mer[i] = nx_gguf_arr_str(merges, i);
    for (uint32_t i = 0; ok && typ && i < d.n_tokens; i++) {
        int64_t t = nx_gguf_arr_int(types, i);
        typ[i] = t < 0 || t > 1000 ? 0 : (int32_t)t; /* out-of-range types are reported by create */
    }
    d.tokens = tok;
    d.merges = mer;
    d.types = typ;
    ok = ok && get_id(g, "tokenizer.ggml.bos_token_id", &d.bos_id, err) &&
         get_id(g, "tokenizer.ggml.eos_token_id", &d.eos_id, err) &&
         get_id(g, "tokenizer.ggml.eot_token_id", &d.eot_id, err) &&
         get_id(g, "tokenizer.ggml.eom_token_id", &d.eom_id, err) &&
         get_id(g, "tokenizer.ggml.padding_token_id", &d.pad_id, err) &&
         get_id(g, "tokenizer.ggml.fim_pad_token_id", &d.fim_pad_id, err) &&
         get_id(g, "tokenizer.ggml.fim_rep_token_id", &d.fim_rep_id, err) &&
         get_id(g, "tokenizer.ggml.fim_sep_token_id", &d.fim_sep_id, err) &&
         nx_gguf_get_bool_or(g, "tokenizer.ggml.add_bos_token", false, &d.add_bos, err) &&
         nx_gguf_get_bool_or(g, "tokenizer.ggml.add_eos_token", false, &d.add_eos, err);
    if (ok && nx_gguf_find_kv(g, NX_KEY_NORMALIZER_NFC)) {
        bool nfc = false;
        ok = nx_gguf_get_bool_or(g, NX_KEY_NORMALIZER_NFC, false, &nfc, err);
        d.normalizer = nfc ? NX_NORM_NFC : NX_NORM_NONE;
    }
    ok = ok && nx_tokenizer_create(out, &d, err);
    free(tok);
    free(mer);
    free(typ);
    return ok;
}
