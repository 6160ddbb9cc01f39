/* tokenizer_regex.h - the pre-tokenizer: splits a text fragment into pieces with the regex of
 * the vocabulary's pre-tokenizer type, using PCRE2 with JIT. */
#ifndef NX_TOKENIZER_REGEX_H
#define NX_TOKENIZER_REGEX_H

#include "base/common.h"
#include "tokenizer/tokenizer.h"

typedef struct nx_pretokenizer nx_pretokenizer;

/* Maps a GGUF `tokenizer.ggml.pre` name to a type; false for names we do not implement. */
bool nx_pretok_from_name(const char *name, size_t len, nx_pretok *out);
/* The pattern as written in the model's tokenizer.json (for documentation and tests). */
const char *nx_pretok_hf_pattern(nx_pretok type);
/* The PCRE2 pattern actually compiled (tokenizer.json text with \s spelled out, see .c). */
const char *nx_pretok_pcre2_pattern(nx_pretok type);

bool nx_pretokenizer_create(nx_pretokenizer **out, nx_pretok type, nx_err *err);
void nx_pretokenizer_free(nx_pretokenizer *p);

/* Calls fn(user, start, len) for each piece of text[0..len), in order; pieces cover the
 * text exactly.  The text must be valid UTF-8 (checked by the caller).  Stops and returns
 * false when fn returns false (fn fills err) or the regex engine fails. */
typedef bool (*nx_piece_fn)(void *user, const char *piece, size_t len, nx_err *err);
bool nx_pretokenize(nx_pretokenizer *p, const char *text, size_t len, nx_piece_fn fn, void *user,
                    nx_err *err);

#endif
