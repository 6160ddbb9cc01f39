/* hf_tokenizer_gguf.c - writes an nx_hf_vocab as tokenizer.* keys of a GGUF (llama.cpp's key
 * names and order: model, pre, tokens, token_type, merges, special ids, add_*, chat_template), plus
 * nextn's tokenizer.ggml.normalizer.nfc = false before chat_template when tokenizer.json has no
 * normalizer. */
#include <stdlib.h>

#include "convert/hf_tokenizer.h"

bool nx_hf_vocab_add_to_gguf(const nx_hf_vocab *v, nx_gguf_writer *w, nx_err *err) {
    bool ok = true;
    const char **strs = nx_malloc((size_t)(v->n_tokens > v->n_merges ? v->n_tokens : v->n_merges) * sizeof *strs,
                                  "string table", err);
    if (!strs) return false;
    ok = ok && nx_gguf_add_str(w, "tokenizer.ggml.model", "gpt2", err);
    ok = ok && nx_gguf_add_str(w, "tokenizer.ggml.pre", v->pre, err);
    for (uint32_t i = 0; ok && i < v->n_tokens; i++) strs[i] = v->tokens[i].ptr;
    ok = ok && nx_gguf_add_arr_str(w, "tokenizer.ggml.tokens", strs, v->n_tokens, err);
    ok = ok && nx_gguf_add_arr(w, "tokenizer.ggml.token_type", NX_GGUF_INT32, v->types, v->n_tokens, err);
    for (uint32_t i = 0; ok && i < v->n_merges; i++) strs[i] = v->merges[i].ptr;
    ok = ok && nx_gguf_add_arr_str(w, "tokenizer.ggml.merges", strs, v->n_merges, err);
    free(strs);
    /* key names as in gguf-py (sic: "seperator") */
    const char *keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                          "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.padding_token_id",
                          "tokenizer.ggml.cls_token_id", "tokenizer.ggml.mask_token_id"};
    const int32_t ids[] = {v->bos_id, v->eos_id, v->unk_id, v->sep_id, v->pad_id, v->cls_id, v->mask_id};
    for (size_t i = 0; ok && i < NX_ARRAY_LEN(keys); i++) {
        int32_t id = ids[i];
        if (id >= 0) ok = nx_gguf_add_u32(w, keys[i], (uint32_t)id, err);
    }
    if (ok && v->add_bos >= 0) ok = nx_gguf_add_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos == 1, err);
    if (ok && v->add_eos >= 0) ok = nx_gguf_add_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos == 1, err);
    /* only when it departs from the default of the qwen2 / qwen35 pre-tokenizers (NFC), so the
     * files of Qwen models stay byte-identical to llama.cpp's converter's */
    if (ok && !v->nfc) ok = nx_gguf_add_bool(w, NX_KEY_NORMALIZER_NFC, false, err);
    if (ok && v->chat_template) ok = nx_gguf_add_str(w, "tokenizer.chat_template", v->chat_template, err);
    return ok;
}
