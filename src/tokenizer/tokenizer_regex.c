/* tokenizer_regex.c - pre-tokenizer regexes run with PCRE2 (UTF + UCP, JIT compiled).
 *
 * The patterns are those of the models' tokenizer.json, with one mechanical change: `\s` and
 * `\S` are spelled out as the Unicode White_Space property, because that is what `\s` means in
 * HF tokenizers (Rust) and in llama.cpp, while PCRE2's `\s` (with UCP) also matches U+180E.
 *   White_Space = U+0009..000D, 0020, 0085, 00A0, 1680, 2000..200A, 2028, 2029, 202F, 205F, 3000
 * (JavaScript's `\s` differs again: it adds U+FEFF and drops U+0085.)
 * `(?i:'s|...)` keeps PCRE2's Unicode caseless matching, like Rust's `(?i:...)`.
 * Letters/numbers/marks come from PCRE2's Unicode tables (Unicode 14 for PCRE2 10.42).
 */
#include "tokenizer/tokenizer_regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

/* As in tokenizer.json of Qwen2/Qwen3 resp. Qwen3.5 (pre_tokenizer Split, behavior Isolated). */
static const char HF_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char HF_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

/* The same with \s / \S replaced by the White_Space set (WS is the body of a character class). */
#define WS "\\t\\n\\x{0B}\\f\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
static const char PCRE_QWEN2[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS "\\p{L}\\p{N}]+[\\r\\n]*"
    "|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
static const char PCRE_QWEN35[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
    "| ?[^" WS "\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
#undef WS

struct nx_pretokenizer {
    nx_pretok type;
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit_stack;
    bool jit;
};

bool nx_pretok_from_name(const char *name, size_t len, nx_pretok *out) {
    /* aliases as in llama.cpp's vocab loader: they all use the qwen2 regex */
    static const char *const qwen2_names[] = {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"};
    for (size_t i = 0; i < NX_ARRAY_LEN(qwen2_names); i++)
        if (strlen(qwen2_names[i]) == len && !memcmp(name, qwen2_names[i], len)) {
            *out = NX_PRETOK_QWEN2;
            return true;
        }
    if (len == 6 && !memcmp(name, "qwen35", 6)) {
        *out = NX_PRETOK_QWEN35;
        return true;
    }
    return false;
}

const char *nx_pretok_hf_pattern(nx_pretok type) {
    return type == NX_PRETOK_QWEN35 ? HF_QWEN35 : HF_QWEN2;
}

const char *nx_pretok_pcre2_pattern(nx_pretok type) {
    return type == NX_PRETOK_QWEN35 ? PCRE_QWEN35 : PCRE_QWEN2;
}

bool nx_pretokenizer_create(nx_pretokenizer **out, nx_pretok type, nx_err *err) {
    *out = NULL;
    nx_pretokenizer *p = nx_calloc(1, sizeof *p, "pre-tokenizer", err);
    if (!p) return false;
    p->type = type;
    int ec;
    PCRE2_SIZE eo;
    p->code = pcre2_compile((PCRE2_SPTR)nx_pretok_pcre2_pattern(type), PCRE2_ZERO_TERMINATED,
                            PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!p->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        nx_pretokenizer_free(p);
        return nx_fail(err, "pre-tokenizer regex: PCRE2 compile error at offset %zu: %s", (size_t)eo,
                       (const char *)msg);
    }
    /* JIT is an optimisation only: the interpreter gives the same matches if it is missing. */
    p->jit = pcre2_jit_compile(p->code, PCRE2_JIT_COMPLETE) == 0;
    p->md = pcre2_match_data_create_from_pattern(p->code, NULL);
    p->mctx = pcre2_match_context_create(NULL);
    if (!p->md || !p->mctx) {
        nx_pretokenizer_free(p);
        return nx_fail(err, "pre-tokenizer: out of memory for PCRE2 match data");
    }
    if (p->jit) {
        /* The patterns only use single-character repeats, which JIT code runs in constant stack;
         * 1 MiB is generous headroom. */
        p->jit_stack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
        if (!p->jit_stack) {
            nx_pretokenizer_free(p);
            return nx_fail(err, "pre-tokenizer: out of memory for the PCRE2 JIT stack");
        }
        pcre2_jit_stack_assign(p->mctx, NULL, p->jit_stack);
    }
    *out = p;
    return true;
}

void nx_pretokenizer_free(nx_pretokenizer *p) {
    if (!p) return;
    if (p->jit_stack) pcre2_jit_stack_free(p->jit_stack);
    if (p->mctx) pcre2_match_context_free(p->mctx);
    if (p->md) pcre2_match_data_free(p->md);
    if (p->code) pcre2_code_free(p->code);
    free(p);
}

bool nx_pretokenize(nx_pretokenizer *p, const char *text, size_t len, nx_piece_fn fn, void *user,
                    nx_err *err) {
    size_t pos = 0;
    while (pos < len) {
        /* NO_UTF_CHECK: the caller validated the whole text once; without it PCRE2 would
         * re-check the rest of the subject on every call (quadratic). */
        int rc = p->jit ? pcre2_jit_match(p->code, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, p->md, p->mctx)
                        : pcre2_match(p->code, (PCRE2_SPTR)text, len, pos, PCRE2_NO_UTF_CHECK, p->md, p->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) {
            /* unmatched rest: HF "Isolated" split keeps it as a piece */
            return fn(user, text + pos, len - pos, err);
        }
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return nx_fail(err, "pre-tokenizer: PCRE2 match error at byte %zu: %s", pos, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(p->md);
        size_t start = ov[0], end = ov[1];
        if (start > pos && !fn(user, text + pos, start - pos, err)) return false; /* gap */
        if (end == start) {
            /* cannot happen with these patterns (every alternative consumes a character);
             * guard against an infinite loop anyway by advancing one character */
            size_t n = 1;
            while (start + n < len && ((unsigned char)text[start + n] & 0xC0) == 0x80) n++;
            if (!fn(user, text + start, n, err)) return false;
            pos = start + n;
            continue;
        }
        if (!fn(user, text + start, end - start, err)) return false;
        pos = end;
    }
    return true;
}
