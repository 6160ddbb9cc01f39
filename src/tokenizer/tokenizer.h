/* tokenizer.h - byte-level BPE tokenizer (GGUF `tokenizer.ggml.model = "gpt2"`), as used by
 * Qwen2/Qwen3/Qwen3.5.
 *
 * Encoding pipeline for a text:
 *   1. special-token split: added tokens are found in the raw text (leftmost, longest first).
 *      USER_DEFINED tokens are always matched; CONTROL tokens only when the caller asks for
 *      special parsing (llama.cpp's `parse_special`).  Matched tokens become their ids.
 *   2. pre-tokenizer: each remaining fragment is split by the pre-tokenizer regex of the vocab
 *      (`qwen2` / `qwen35`, run with PCRE2 + JIT, see tokenizer_regex.c).
 *   3. byte-level BPE: each piece's UTF-8 bytes are mapped through the GPT-2 byte->unicode table,
 *      then merges are applied greedily, lowest rank first, leftmost on ties.
 *   Between 1 and 2, when the vocabulary normalises (NFC), each fragment between added tokens is
 *   put into Unicode NFC (libutf8proc), as HF tokenizers apply tokenizer.json's "normalizer" to
 *   the text between added tokens.  Whether it normalises: GGUF key
 *   tokenizer.ggml.normalizer.nfc (bool) when present, else the pre-tokenizer's default (NFC for
 *   qwen2 / qwen35: every Qwen2..Qwen3.5 tokenizer.json declares {"type": "NFC"}).  llama.cpp
 *   never normalises; nx_tokenizer_set_nfc(t, false) matches it.
 * Input must be valid UTF-8; anything else is rejected with an error naming the byte offset.
 *
 * Decoding maps each token back to bytes: NORMAL tokens through the inverse byte table,
 * USER_DEFINED tokens verbatim, CONTROL tokens verbatim only when `special` is set.
 *
 * A tokenizer is immutable after creation and may be used from several threads at once,
 * except that nx_tokenize() uses a per-call scratch; the word cache is per nx_tokenizer and
 * therefore NOT thread-safe: use one tokenizer per thread when encoding in parallel.
 */
#ifndef NX_TOKENIZER_H
#define NX_TOKENIZER_H

#include "base/common.h"
#include "gguf/gguf.h"

/* GGUF token types (tokenizer.ggml.token_type). */
enum {
    NX_TOKEN_NORMAL = 1,
    NX_TOKEN_UNKNOWN = 2,
    NX_TOKEN_CONTROL = 3,
    NX_TOKEN_USER_DEFINED = 4,
    NX_TOKEN_UNUSED = 5,
    NX_TOKEN_BYTE = 6,
};

/* GGUF key (bool) saying whether the vocabulary's text is put into NFC.  nextn's own: llama.cpp
 * has tokenizer.ggml.normalizer.{lowercase,strip_accents} for WPM vocabularies but no NFC key,
 * and ignores this one. */
#define NX_KEY_NORMALIZER_NFC "tokenizer.ggml.normalizer.nfc"

/* Unicode normalisation of the text between added tokens. */
typedef enum nx_normalizer {
    NX_NORM_DEFAULT = 0,   /* the pre-tokenizer's default: NFC for qwen2 and qwen35 */
    NX_NORM_NONE = 1,
    NX_NORM_NFC = 2,
} nx_normalizer;

typedef enum nx_pretok {
    NX_PRETOK_QWEN2 = 0,   /* "qwen2" and its aliases */
    NX_PRETOK_QWEN35 = 1,  /* "qwen35": letter runs also take combining marks (\p{M}) */
} nx_pretok;

/* A vocabulary as plain arrays (what the GGUF keys hold).  Strings are length-delimited and
 * need not be NUL-terminated; nothing is retained after nx_tokenizer_create returns. */
typedef struct nx_vocab_desc {
    const char *name;          /* used in error messages (e.g. the file name); may be NULL */
    uint32_t n_tokens;
    const nx_str *tokens;      /* [n_tokens] token texts (byte-level alphabet for NORMAL) */
    const int32_t *types;      /* [n_tokens] NX_TOKEN_*, or NULL = all NORMAL */
    uint32_t n_merges;
    const nx_str *merges;      /* [n_merges] "left right"; rank = index */
    const char *pre;           /* pre-tokenizer name: "qwen2", "qwen35", ... (NULL = "qwen2") */
    nx_normalizer normalizer;  /* NX_NORM_DEFAULT unless the vocabulary says */
    int32_t bos_id, eos_id, eot_id, eom_id, pad_id; /* -1 = absent */
    int32_t fim_pad_id, fim_rep_id, fim_sep_id;     /* -1 = absent (then found by text) */
    bool add_bos, add_eos;
} nx_vocab_desc;

/* Fills a desc with "absent" defaults (ids -1, no add_bos/add_eos, pre NULL). */
void nx_vocab_desc_init(nx_vocab_desc *d);

typedef struct nx_tokenizer nx_tokenizer;

bool nx_tokenizer_create(nx_tokenizer **out, const nx_vocab_desc *desc, nx_err *err);
/* Reads tokenizer.ggml.{model,pre,tokens,token_type,merges,*_token_id,add_*_token,
 * normalizer.nfc}.  The
 * tokenizer copies what it needs: the gguf may be closed afterwards. */
bool nx_tokenizer_from_gguf(nx_tokenizer **out, const nx_gguf *g, nx_err *err);
void nx_tokenizer_free(nx_tokenizer *t);

uint32_t nx_tokenizer_n_vocab(const nx_tokenizer *t);
nx_pretok nx_tokenizer_pretok(const nx_tokenizer *t);
/* Whether encoding puts text into NFC first (see above); set_nfc overrides the vocabulary's
 * choice (false = never normalise, as llama.cpp). */
bool nx_tokenizer_nfc(const nx_tokenizer *t);
void nx_tokenizer_set_nfc(nx_tokenizer *t, bool nfc);
int32_t nx_tokenizer_bos(const nx_tokenizer *t);   /* -1 if none */
int32_t nx_tokenizer_eos(const nx_tokenizer *t);
int32_t nx_tokenizer_eot(const nx_tokenizer *t);
int32_t nx_tokenizer_pad(const nx_tokenizer *t);
bool nx_tokenizer_add_bos(const nx_tokenizer *t);
/* End of generation, built as llama.cpp does: eos, eot (found by text when absent), eom,
 * FIM pad/repo/file-sep (<|fim_pad|>, <|repo_name|>, <|file_sep|> by text when absent) and
 * every token whose text is in llama.cpp's list (<|im_end|>, <|endoftext|>, <|eot_id|>, ...). */
bool nx_tokenizer_is_eog(const nx_tokenizer *t, int32_t id);
/* The eog ids in ascending order; *n receives the count. */
const int32_t *nx_tokenizer_eog_ids(const nx_tokenizer *t, uint32_t *n);
/* Token text as stored in the vocabulary (byte-level alphabet), NULL for an invalid id. */
const char *nx_tokenizer_token_text(const nx_tokenizer *t, int32_t id, uint32_t *len);
int32_t nx_tokenizer_token_type(const nx_tokenizer *t, int32_t id); /* 0 for invalid id */
/* Looks up a token by its exact vocabulary text; -1 if absent. */
int32_t nx_tokenizer_find(const nx_tokenizer *t, const char *text, size_t len);

/* Token id list that grows as needed. */
typedef struct nx_tokens {
    int32_t *ids;
    size_t n, cap;
} nx_tokens;
void nx_tokens_free(nx_tokens *v);

/* Appends the tokens of `text` to `out` (BOS first when add_bos and the vocab says so).
 * parse_special: match CONTROL tokens written in the text (USER_DEFINED always match). */
bool nx_tokenize(nx_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                 nx_tokens *out, nx_err *err);

/* Growable byte buffer for decoded text. */
typedef struct nx_buf {
    char *data;   /* always NUL-terminated when non-NULL */
    size_t len, cap;
} nx_buf;
void nx_buf_free(nx_buf *b);
bool nx_buf_append(nx_buf *b, const void *p, size_t n, nx_err *err);

/* Appends the bytes of one token.  special: render CONTROL tokens' text (else nothing). */
bool nx_token_to_piece(const nx_tokenizer *t, int32_t id, bool special, nx_buf *out, nx_err *err);
/* Appends the bytes of a token sequence (may end in the middle of a UTF-8 character). */
bool nx_detokenize(const nx_tokenizer *t, const int32_t *ids, size_t n, bool special, nx_buf *out,
                   nx_err *err);

/* Streaming detokenizer: push tokens one at a time; `out` only ever receives whole UTF-8
 * characters.  Bytes that can never form a valid character are replaced by U+FFFD (so a
 * stream of bad bytes cannot stall the output); an incomplete tail is held until the next
 * token, and nx_detok_stream_flush() emits it as U+FFFD at the end. */
typedef struct nx_detok_stream {
    const nx_tokenizer *tok;
    bool special;
    unsigned char pending[4];
    unsigned n_pending;
} nx_detok_stream;
void nx_detok_stream_init(nx_detok_stream *s, const nx_tokenizer *t, bool special);
bool nx_detok_stream_push(nx_detok_stream *s, int32_t id, nx_buf *out, nx_err *err);
bool nx_detok_stream_flush(nx_detok_stream *s, nx_buf *out, nx_err *err);

#endif
