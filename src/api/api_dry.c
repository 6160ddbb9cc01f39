/* api_dry.c - DRY sequence breakers of the public API (include/nextn.h, nextn_dry_breakers):
 * strings turned into the token sequences the sampler's DRY matches (src/sample/sample.h), the
 * way llama.cpp does it (src/llama-sampler.cpp, get_overlapping_token_sequences; a breaker is cut
 * to its first 40 bytes, a tail to 20 tokens):
 *   - every token whose text contains the string is a one-token breaker;
 *   - a token whose text ends with a proper prefix of the string (at any place the string's first
 *     byte occurs in it) is the head of a sequence, its tail the tokens of the rest of the string
 *     (tokenized as plain text, no BOS), each (head, tail) once.
 * One pass over the vocabulary (each token's text rendered once, at most 64 strings): V
 * detokenizations, paid only by requests that turn DRY on (the server keeps the default list's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn.h"

#define MAX_CHARS 40
#define MAX_TAIL 20

typedef struct seq_buf {
    int32_t *tok, *len;
    int32_t n, n_tok, cap, cap_tok;
} seq_buf;

/* Appends the sequence head + tail unless it is already there: among the sequences from index
 * `from` on (those of this head: the vocabulary is walked in id order), starting at token `off`. */
static bool seq_add(seq_buf *b, int32_t from, int32_t from_off, int32_t head, const int32_t *tail, int32_t n_tail) {
    for (int32_t i = from, off = from_off; i < b->n; off += b->len[i++])
        if (b->len[i] == n_tail + 1 && b->tok[off] == head &&
            (n_tail == 0 || memcmp(b->tok + off + 1, tail, (size_t)n_tail * sizeof *tail) == 0))
            return true;
    if (b->n == b->cap) {
        const int32_t cap = b->cap ? 2 * b->cap : 64;
        int32_t *l = realloc(b->len, (size_t)cap * sizeof *l);
        if (!l) return false;
        b->len = l;
        b->cap = cap;
    }
    if (b->n_tok + n_tail + 1 > b->cap_tok) {
        const int32_t cap = 2 * (b->n_tok + n_tail + 1) + 64;
        int32_t *t = realloc(b->tok, (size_t)cap * sizeof *t);
        if (!t) return false;
        b->tok = t;
        b->cap_tok = cap;
    }
    b->tok[b->n_tok++] = head;
    if (n_tail) memcpy(b->tok + b->n_tok, tail, (size_t)n_tail * sizeof *tail);
    b->n_tok += n_tail;
    b->len[b->n++] = n_tail + 1;
    return true;
}

bool nextn_dry_breakers(nextn_tokenizer *tok, const char *const *strs, int32_t n_strs, int32_t n_vocab,
                        nextn_dry_seqs *out, nextn_error *err) {
    memset(out, 0, sizeof *out);
    if (!tok || n_strs < 0 || (n_strs > 0 && !strs) || n_vocab <= 0) {
        if (err) snprintf(err->msg, sizeof err->msg, "DRY breakers: bad arguments");
        return false;
    }
    seq_buf b = {0};
    char word[1024];
    int32_t tail[MAX_TAIL + 8];
    char strs_cut[64][MAX_CHARS + 1];
    size_t lens[64];
    int32_t n_use = 0;
    for (int32_t s = 0; s < n_strs && n_use < 64; s++) { /* cut to 40 bytes; empty ones skipped, as llama.cpp */
        snprintf(strs_cut[n_use], sizeof strs_cut[n_use], "%s", strs[s] ? strs[s] : "");
        if ((lens[n_use] = strlen(strs_cut[n_use])) > 0) n_use++;
    }
    bool ok = true;
    /* each token rendered once, matched against every string (llama.cpp renders it once per string;
     * the sequences found are the same, in another order) */
    for (int32_t id = 0; id < n_vocab && ok; id++) {
        size_t wl = 0;
        nextn_error e;
        if (!nextn_detokenize(tok, &id, 1, true, word, sizeof word - 1, &wl, &e)) continue; /* > 1 KiB: skip */
        if (wl == 0) continue;
        word[wl] = '\0';
        const int32_t from = b.n, from_off = b.n_tok;
        for (int32_t s = 0; s < n_use && ok; s++) {
            const char *str = strs_cut[s];
            const size_t sl = lens[s];
            if (memmem(word, wl, str, sl)) {
                ok = seq_add(&b, from, from_off, id, NULL, 0);
                continue;
            }
            for (size_t pos = 0; pos < wl && ok; pos++) {
                if (word[pos] != str[0]) continue;
                size_t i = 1;
                while (i < sl && pos + i < wl && word[pos + i] == str[i]) i++;
                if (pos + i < wl) continue; /* a mismatch inside the word */
                /* the word ends with str[0..i): the tail is the rest of the string */
                int32_t nt = 0;
                if (!nextn_tokenize(tok, str + i, sl - i, false, false, tail, MAX_TAIL + 8, &nt, &e)) {
                    int32_t *big = nt > 0 ? malloc((size_t)nt * sizeof *big) : NULL;
                    ok = big && nextn_tokenize(tok, str + i, sl - i, false, false, big, nt, &nt, &e);
                    if (ok) memcpy(tail, big, MAX_TAIL * sizeof *tail);
                    free(big);
                    if (!ok) break;
                }
                if (nt > MAX_TAIL) nt = MAX_TAIL;
                ok = seq_add(&b, from, from_off, id, tail, nt);
            }
        }
    }
    if (!ok) {
        free(b.tok);
        free(b.len);
        if (err) snprintf(err->msg, sizeof err->msg, "DRY breakers: out of memory or a tokenizer error");
        return false;
    }
    out->tokens = b.tok;
    out->lens = b.len;
    out->n = b.n;
    return true;
}

void nextn_dry_seqs_free(nextn_dry_seqs *s) {
    if (!s) return;
    free(s->tokens);
    free(s->lens);
    memset(s, 0, sizeof *s);
}
