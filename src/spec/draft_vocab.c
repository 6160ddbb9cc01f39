/* draft_vocab.c - frequency files and the choice of a reduced draft vocabulary (draft_vocab.h). */
#include "spec/draft_vocab.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAGIC "nextn-draft-vocab 1"
#define LINE_MAX_LEN 4096

uint64_t nx_draft_vocab_fingerprint(const nx_tokenizer *t) {
    if (!t) return 0;
    uint64_t h = 0xcbf29ce484222325ULL;
    const uint32_t n = nx_tokenizer_n_vocab(t);
    for (uint32_t id = 0; id < n; id++) {
        uint32_t len = 0;
        const char *s = nx_tokenizer_token_text(t, (int32_t)id, &len);
        /* the length first, so that ("ab","c") and ("a","bc") differ */
        for (int b = 0; b < 4; b++) h = (h ^ ((len >> (8 * b)) & 0xff)) * 0x100000001b3ULL;
        for (uint32_t i = 0; s && i < len; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
    }
    return h == 0 ? 1 : h; /* 0 means "no tokenizer" */
}

typedef struct ranked {
    uint64_t count;
    int32_t id;
} ranked;

static int by_count_desc(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

bool nx_draft_vocab_save(const char *path, const uint64_t *counts, uint32_t n_vocab, uint64_t fingerprint,
                         const char *source, nx_err *err) {
    ranked *r = nx_malloc((size_t)n_vocab * sizeof *r, "draft vocabulary", err);
    if (!r) return false;
    uint32_t n = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_vocab; i++) {
        total += counts[i];
        if (counts[i]) r[n++] = (ranked){counts[i], (int32_t)i};
    }
    qsort(r, n, sizeof *r, by_count_desc);
    FILE *f = fopen(path, "w");
    if (!f) {
        free(r);
        return nx_fail(err, "%s: cannot create: %s", path, strerror(errno));
    }
    fprintf(f, MAGIC "\nn_vocab %" PRIu32 "\n", n_vocab);
    if (fingerprint) fprintf(f, "fingerprint %016" PRIx64 "\n", fingerprint);
    else fprintf(f, "fingerprint none\n");
    fprintf(f, "tokens %" PRIu64 "\n", total);
    /* the source is informative only: keep it on one line */
    fprintf(f, "source ");
    for (const char *s = source ? source : ""; *s && s - source < 1000; s++) fputc(*s == '\n' || *s == '\r' ? ' ' : *s, f);
    fprintf(f, "\n# id count: most frequent first, ties by lower id; %" PRIu32 " of %" PRIu32 " tokens occurred\n", n,
            n_vocab);
    for (uint32_t i = 0; i < n; i++) fprintf(f, "%" PRId32 " %" PRIu64 "\n", r[i].id, r[i].count);
    free(r);
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    return ok ? true : nx_fail(err, "%s: write failed: %s", path, strerror(errno));
}

/* Reads one line (without its '\n') into buf; false at end of file.  *too_long when the line
 * does not fit. */
static bool read_line(FILE *f, char *buf, size_t cap, bool *too_long) {
    *too_long = false;
    if (!fgets(buf, (int)cap, f)) return false;
    size_t n = strlen(buf);
    if (n > 0 && buf[n - 1] == '\n') buf[--n] = 0;
    else if (!feof(f)) *too_long = true;
    return true;
}

static bool parse_u64(const char *s, uint64_t *out, const char **end) {
    char *e;
    errno = 0;
    if (*s < '0' || *s > '9') return false;
    unsigned long long v = strtoull(s, &e, 10);
    if (errno || e == s) return false;
    *out = v;
    *end = e;
    return true;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Reads the header and the first K listed ids of the stream into ids (in file order); *n_read
 * says how many the file listed (<= K).  `path` names the stream in messages. */
static bool read_stream(FILE *f, const char *path, uint32_t n_vocab, uint64_t fingerprint, int32_t K, int32_t *ids,
                        int32_t *n_read, bool *seen, nx_err *err) {
    char *line = nx_malloc(LINE_MAX_LEN, "draft vocabulary", err);
    if (!line) return false;
    bool ok = false, too_long;
    long ln = 0;
    int header = 0; /* 0 magic, 1 n_vocab, 2 fingerprint, 3 tokens, 4 source, 5 entries */
    uint64_t prev = UINT64_MAX;
    *n_read = 0;
    while (read_line(f, line, LINE_MAX_LEN, &too_long)) {
        ln++;
        if (too_long) {
            nx_fail(err, "draft vocabulary %s line %ld: longer than %d bytes", path, ln, LINE_MAX_LEN - 1);
            goto done;
        }
        if (header > 0 && line[0] == '#') continue;
        const char *end;
        uint64_t v;
        switch (header) {
        case 0:
            if (strcmp(line, MAGIC) != 0) {
                nx_fail(err, "draft vocabulary %s: not a frequency file (first line must be '" MAGIC "')", path);
                goto done;
            }
            break;
        case 1:
            if (strncmp(line, "n_vocab ", 8) || !parse_u64(line + 8, &v, &end) || *end) {
                nx_fail(err, "draft vocabulary %s line %ld: expected 'n_vocab <count>'", path, ln);
                goto done;
            }
            if (v != n_vocab) {
                nx_fail(err, "draft vocabulary %s was made for a vocabulary of %" PRIu64 " tokens, the model has %" PRIu32
                        " (a file of another model?)", path, v, n_vocab);
                goto done;
            }
            break;
        case 2: {
            if (strncmp(line, "fingerprint ", 12)) {
                nx_fail(err, "draft vocabulary %s line %ld: expected 'fingerprint <hex>|none'", path, ln);
                goto done;
            }
            const char *h = line + 12;
            uint64_t fp = 0;
            if (strcmp(h, "none") != 0) {
                char *e;
                errno = 0;
                fp = strtoull(h, &e, 16);
                if (errno || e == h || *e || fp == 0) {
                    nx_fail(err, "draft vocabulary %s line %ld: bad fingerprint '%s'", path, ln, h);
                    goto done;
                }
            }
            /* both known and different: another tokenizer with the same size */
            if (fp && fingerprint && fp != fingerprint) {
                nx_fail(err, "draft vocabulary %s: tokenizer fingerprint %016" PRIx64 " differs from the model's %016"
                        PRIx64 " (counted with another tokenizer of the same size)", path, fp, fingerprint);
                goto done;
            }
            break;
        }
        case 3:
            if (strncmp(line, "tokens ", 7) || !parse_u64(line + 7, &v, &end) || *end) {
                nx_fail(err, "draft vocabulary %s line %ld: expected 'tokens <count>'", path, ln);
                goto done;
            }
            break;
        case 4:
            if (strncmp(line, "source", 6) || (line[6] != ' ' && line[6] != 0)) {
                nx_fail(err, "draft vocabulary %s line %ld: expected 'source <text>'", path, ln);
                goto done;
            }
            break;
        default: {
            uint64_t id, count;
            if (!parse_u64(line, &id, &end) || *end != ' ' || !parse_u64(end + 1, &count, &end) || *end) {
                nx_fail(err, "draft vocabulary %s line %ld: expected '<id> <count>', got '%.60s'", path, ln, line);
                goto done;
            }
            if (id >= n_vocab) {
                nx_fail(err, "draft vocabulary %s line %ld: token id %" PRIu64 " out of range (vocabulary has %" PRIu32
                        " tokens)", path, ln, id, n_vocab);
                goto done;
            }
            if (count > prev) {
                nx_fail(err, "draft vocabulary %s line %ld: counts must not increase (%" PRIu64 " after %" PRIu64 ")",
                        path, ln, count, prev);
                goto done;
            }
            if (seen[id]) {
                nx_fail(err, "draft vocabulary %s line %ld: token id %" PRIu64 " listed twice", path, ln, id);
                goto done;
            }
            seen[id] = true;
            prev = count;
            if (*n_read < K) ids[(*n_read)++] = (int32_t)id;
            break;
        }
        }
        if (header < 5) header++;
    }
    if (ferror(f)) {
        nx_fail(err, "draft vocabulary %s: read error: %s", path, strerror(errno));
        goto done;
    }
    if (header < 5) {
        nx_fail(err, "draft vocabulary %s: truncated header (%d of 5 lines)", path, header);
        goto done;
    }
    ok = true;
done:
    free(line);
    return ok;
}

bool nx_draft_vocab_select_stream(FILE *f, const char *name, uint32_t n_vocab, uint64_t fingerprint, int32_t K,
                                  int32_t *ids, nx_err *err) {
    if (K < 1 || (uint32_t)K > n_vocab)
        return nx_fail(err, "draft_vocab %d out of range (1..%" PRIu32 ", the model's vocabulary)", K, n_vocab);
    int32_t n = 0;
    if (f) {
        bool *seen = nx_calloc(n_vocab, sizeof *seen, "draft vocabulary", err);
        if (!seen) return false;
        bool ok = read_stream(f, name, n_vocab, fingerprint, K, ids, &n, seen, err);
        if (ok && n < K) {
            /* fewer listed than wanted: the unlisted ids in increasing order */
            memset(seen, 0, n_vocab * sizeof *seen);
            for (int32_t i = 0; i < n; i++) seen[ids[i]] = true;
            for (uint32_t id = 0; id < n_vocab && n < K; id++)
                if (!seen[id]) ids[n++] = (int32_t)id;
        }
        free(seen);
        if (!ok) return false;
    } else {
        for (n = 0; n < K; n++) ids[n] = n;
    }
    qsort(ids, (size_t)K, sizeof *ids, cmp_i32);
    return true;
}

bool nx_draft_vocab_select(const char *path, uint32_t n_vocab, uint64_t fingerprint, int32_t K, int32_t *ids,
                           nx_err *err) {
    if (K < 1 || (uint32_t)K > n_vocab)
        return nx_fail(err, "draft_vocab %d out of range (1..%" PRIu32 ", the model's vocabulary)", K, n_vocab);
    if (!path) return nx_draft_vocab_select_stream(NULL, NULL, n_vocab, fingerprint, K, ids, err);
    FILE *f = fopen(path, "r");
    if (!f) return nx_fail(err, "draft vocabulary %s: cannot open: %s", path, strerror(errno));
    bool ok = nx_draft_vocab_select_stream(f, path, n_vocab, fingerprint, K, ids, err);
    fclose(f);
    return ok;
}

bool nx_draft_vocab_sibling(const char *model_path, char *out, size_t out_len, bool *found, nx_err *err) {
    *found = false;
    if (!model_path) return true;
    size_t n = strlen(model_path);
    if (n >= 5 && !strcmp(model_path + n - 5, ".gguf")) n -= 5;
    int w = snprintf(out, out_len, "%.*s.draft-vocab.txt", (int)n, model_path);
    if (w < 0 || (size_t)w >= out_len) return nx_fail(err, "%s: draft-vocab file name too long", model_path);
    struct stat st;
    *found = stat(out, &st) == 0 && S_ISREG(st.st_mode);
    return true;
}

int32_t nx_draft_vocab_auto_k(uint32_t n_vocab) { return (int32_t)((n_vocab + 3) / 4); }

bool nx_draft_vocab_auto(const char *model_path, uint32_t n_vocab, char *file, size_t file_len, int32_t *K,
                         nx_err *err) {
    bool found = false;
    *K = 0;
    if (model_path && !nx_draft_vocab_sibling(model_path, file, file_len, &found, err)) return false;
    if (found) *K = nx_draft_vocab_auto_k(n_vocab);
    return true;
}

bool nx_draft_vocab_auto_failed(nx_err *err) {
    return nx_fail_prefix(err, "draft vocabulary file found beside the model (draft_vocab = NEXTN_DRAFT_VOCAB_ALL: "
                               "whole vocabulary)");
}

int32_t nx_draft_vocab_default_k(uint32_t n_vocab) {
    return n_vocab >= NX_DRAFT_VOCAB_RANK_MIN_V ? nx_draft_vocab_auto_k(n_vocab) : 0;
}
