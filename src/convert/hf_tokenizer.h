/* hf_tokenizer.h - reads a Hugging Face byte-level BPE tokenizer (tokenizer.json, plus the
 * optional tokenizer_config.json and config.json) into the GGUF vocabulary that llama.cpp's
 * convert_hf_to_gguf.py would write for it:
 *   tokens      vocab + added tokens at their ids; ids up to the vocab size that nothing uses
 *               become "[PAD<id>]" of type UNUSED (vocab size = config.json vocab_size when
 *               given - text_config's first, as llama.cpp merges it over the top level -
 *               else max id + 1)
 *   token types added token with special=true or that looks special (<|...|>) -> CONTROL,
 *               other added tokens -> USER_DEFINED, everything else NORMAL
 *   merges      model.merges as "left right" strings (both the string and the pair form)
 *   pre         "qwen2" / "qwen35", recognised from the Split regex of the pre_tokenizer
 *   normalizer  tokenizer.json's "normalizer": null or NFC; null is written as the nextn key
 *               tokenizer.ggml.normalizer.nfc = false (NFC is the default when the key is
 *               absent; llama.cpp has no such key and ignores it)
 *   ids         bos/eos/unk/sep/pad/cls/mask from tokenizer_config.json's *_token strings
 *               (looked up among the added tokens), else config.json's *_token_id (top
 *               level, then text_config)
 *   add_bos/add_eos from tokenizer_config.json; chat_template from tokenizer_config.json, else
 *               chat_template.jinja / chat_template.json next to tokenizer.json
 * Only what Qwen-style tokenizers use is accepted; anything else is a clear error. */
#ifndef NX_HF_TOKENIZER_H
#define NX_HF_TOKENIZER_H

#include "nextn_internal.h"

typedef struct nx_hf_vocab {
    uint32_t n_tokens;
    nx_str *tokens;            /* each ptr owned (NUL-terminated) */
    int32_t *types;
    uint32_t n_merges;
    nx_str *merges;            /* each ptr owned (NUL-terminated) */
    char pre[16];
    bool nfc;                  /* tokenizer.json's normalizer is NFC (else none) */
    int32_t bos_id, eos_id, unk_id, sep_id, pad_id, cls_id, mask_id; /* -1 = absent */
    int add_bos, add_eos;      /* -1 = not given, else 0/1 */
    char *chat_template;       /* NULL if none */
} nx_hf_vocab;

/* config_path / tokenizer_config_path may be NULL. */
bool nx_hf_vocab_load(nx_hf_vocab *v, const char *tokenizer_json_path, const char *tokenizer_config_path,
                      const char *config_path, nx_err *err);
void nx_hf_vocab_free(nx_hf_vocab *v);

/* A desc pointing into v (valid while v lives). */
void nx_hf_vocab_desc(const nx_hf_vocab *v, nx_vocab_desc *d);

/* Adds the tokenizer.* keys to a GGUF writer, in llama.cpp's order. */
bool nx_hf_vocab_add_to_gguf(const nx_hf_vocab *v, nx_gguf_writer *w, nx_err *err);

#endif
