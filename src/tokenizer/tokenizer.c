/* tokenizer.c - vocabulary tables, special tokens, encode/decode driver (see tokenizer.h). */
#include "tokenizer/tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer/tokenizer_bpe.h"
#include "tokenizer/tokenizer_regex.h"
#include "base/utf8.h"

typedef struct nx_special {
    int32_t id;
    uint32_t len;
    const char *text;   /* inside the tokenizer's text arena */
    bool always;        /* USER_DEFINED: matched even without parse_special */
} nx_special;

struct nx_tokenizer {
    uint32_t n_vocab;
    char *text;            /* all token texts, NUL-separated */
    uint32_t *text_off;    /* [n_vocab + 1] */
    char *dec;             /* decoded bytes of every token (see token_decoded()) */
    uint32_t *dec_off;     /* [n_vocab + 1] */
    uint8_t *types;        /* [n_vocab] NX_TOKEN_* */
    uint32_t *index;       /* text -> id + 1 (0 = empty), open addressing */
    uint64_t index_mask;
    nx_bpe_merges merges;
    int32_t byte_token[256];
    nx_special *specials;  /* sorted by first byte, then longest first */
    uint32_t n_specials;
    uint32_t special_start[257]; /* specials with first byte b: [start[b], start[b+1]) */
    nx_pretok pretok;
    nx_pretokenizer *pre;
    nx_bpe_state bpe;
    int32_t bos, eos, eot, eom, pad;
    bool add_bos, add_eos;
    int32_t *eog;
    uint32_t n_eog;
    bool nfc;              /* put fragments into NFC before pre-tokenizing */
    utf8proc_int32_t *norm; /* NFC scratch: code points, then the UTF-8 result in place */
    size_t norm_cap;       /* code points */
    nx_buf nfc_out;        /* the fragment in NFC */
};

/* ---- GPT-2 byte <-> unicode table --------------------------------------------------------
 * Printable bytes 0x21..0x7E, 0xA1..0xAC, 0xAE..0xFF map to the same code point; the other 68
 * bytes map, in increasing byte order, to U+0100, U+0101, ...  All mapped code points are
 * below U+0144 (256 + 68). */
enum { BYTE_CP_LIMIT = 256 + 68 };

typedef struct byte_tables {
    uint32_t to_cp[256];
    int16_t to_byte[BYTE_CP_LIMIT]; /* -1 where the code point is not in the alphabet */
} byte_tables;

static void byte_tables_init(byte_tables *bt) {
    uint32_t extra = 256;
    for (int i = 0; i < BYTE_CP_LIMIT; i++) bt->to_byte[i] = -1;
    for (unsigned b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        bt->to_cp[b] = printable ? b : extra++;
        bt->to_byte[bt->to_cp[b]] = (int16_t)b;
    }
}

static uint64_t hash_text(const char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 31;
    h *= 0x9E3779B97F4A7C15ULL;
    return h ^ (h >> 29);
}

int32_t nx_tokenizer_find(const nx_tokenizer *t, const char *p, size_t n) {
    for (uint64_t i = hash_text(p, n) & t->index_mask;; i = (i + 1) & t->index_mask) {
        uint32_t v = t->index[i];
        if (v == 0) return -1;
        uint32_t id = v - 1, off = t->text_off[id], len = t->text_off[id + 1] - off - 1;
        if (len == n && !memcmp(t->text + off, p, n)) return (int32_t)id;
    }
}

void nx_vocab_desc_init(nx_vocab_desc *d) {
    memset(d, 0, sizeof *d);
    d->bos_id = d->eos_id = d->eot_id = d->eom_id = d->pad_id = -1;
    d->fim_pad_id = d->fim_rep_id = d->fim_sep_id = -1;
}

void nx_tokenizer_free(nx_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->text_off);
    free(t->dec);
    free(t->dec_off);
    free(t->types);
    free(t->index);
    nx_bpe_merges_free(&t->merges);
    free(t->specials);
    nx_pretokenizer_free(t->pre);
    nx_bpe_state_free(&t->bpe);
    free(t->eog);
    free(t->norm);
    nx_buf_free(&t->nfc_out);
    free(t);
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* ---- construction ------------------------------------------------------------------------- */

static bool build_texts(nx_tokenizer *t, const nx_vocab_desc *d, const byte_tables *bt, const char *name, nx_err *err) {
    uint64_t total = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        if (d->tokens[i].len > UINT32_MAX / 4) return nx_fail(err, "%s: token %u is %llu bytes long", name, i, (unsigned long long)d->tokens[i].len);
        total += d->tokens[i].len + 1;
    }
    if (total > UINT32_MAX / 4) return nx_fail(err, "%s: token texts total %llu bytes (limit 1 GiB)", name, (unsigned long long)total);
    t->text = nx_malloc(total, "token texts", err);
    t->text_off = nx_malloc(((size_t)d->n_tokens + 1) * sizeof *t->text_off, "token offsets", err);
    t->dec = nx_malloc(total, "decoded token bytes", err); /* decoding never grows a token */
    t->dec_off = nx_malloc(((size_t)d->n_tokens + 1) * sizeof *t->dec_off, "token offsets", err);
    t->types = nx_malloc(d->n_tokens, "token types", err);
    if (!t->text || !t->text_off || !t->dec || !t->dec_off || !t->types) return false;
    uint32_t off = 0, doff = 0;
    for (uint32_t i = 0; i < d->n_tokens; i++) {
        nx_str s = d->tokens[i];
        int32_t type = d->types ? d->types[i] : NX_TOKEN_NORMAL;
        if (type < NX_TOKEN_NORMAL || type > NX_TOKEN_BYTE)
            return nx_fail(err, "%s: token %u has type %d (valid: 1..6)", name, i, (int)type);
        if (nx_utf8_valid_prefix(s.ptr, s.len) != s.len)
            return nx_fail(err, "%s: token %u is not valid UTF-8", name, i);
        t->types[i] = (uint8_t)type;
        t->text_off[i] = off;
        memcpy(t->text + off, s.ptr, s.len);
        off += (uint32_t)s.len;
        t->text[off++] = 0;
        /* decoded form: what nx_token_to_piece emits (CONTROL text is kept and only emitted on
         * request; UNUSED tokens decode to nothing) */
        t->dec_off[i] = doff;
        const unsigned char *p = (const unsigned char *)s.ptr;
        if (type == NX_TOKEN_NORMAL) {
            for (size_t j = 0; j < s.len;) {
                int n = nx_utf8_char_len(p + j, s.len - j);
                uint32_t cp = nx_utf8_decode(p + j, n);
                int b = cp < BYTE_CP_LIMIT ? bt->to_byte[cp] : -1;
                if (b >= 0) t->dec[doff++] = (char)b;
                else { memcpy(t->dec + doff, p + j, (size_t)n); doff += (uint32_t)n; } /* not byte-level: verbatim */
                j += (size_t)n;
            }
        } else if (type == NX_TOKEN_BYTE) {
            /* "<0xAB>" is the byte 0xAB (SentencePiece-style byte tokens) */
            int hi = s.len == 6 ? hex_digit(s.ptr[3]) : -1, lo = s.len == 6 ? hex_digit(s.ptr[4]) : -1;
            if (hi >= 0 && lo >= 0 && !memcmp(s.ptr, "<0x", 3) && s.ptr[5] == '>') t->dec[doff++] = (char)(hi * 16 + lo);
        } else if (type != NX_TOKEN_UNUSED) {
            memcpy(t->dec + doff, s.ptr, s.len);
            doff += (uint32_t)s.len;
        }
    }
    t->text_off[d->n_tokens] = off;
    t->dec_off[d->n_tokens] = doff;
    return true;
}

static bool build_index(nx_tokenizer *t, const char *name, nx_err *err) {
    uint64_t cap = 16;
    while (cap < (uint64_t)t->n_vocab * 2) cap <<= 1;
    t->index = nx_calloc(cap, sizeof *t->index, "token index", err);
    if (!t->index) return false;
    t->index_mask = cap - 1;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        const char *p = t->text + t->text_off[id];
        size_t n = t->text_off[id + 1] - t->text_off[id] - 1;
        uint64_t i = hash_text(p, n) & t->index_mask;
        for (;; i = (i + 1) & t->index_mask) {
            uint32_t v = t->index[i];
            if (v == 0) { t->index[i] = id + 1; break; }
            uint32_t o = t->text_off[v - 1];
            /* duplicate texts: the first id wins (HF keeps one id per string as well) */
            if (t->text_off[v] - o - 1 == n && !memcmp(t->text + o, p, n)) break;
        }
    }
    (void)name;
    return true;
}

static bool build_merges(nx_tokenizer *t, const nx_vocab_desc *d, const byte_tables *bt, const char *name, nx_err *err) {
    if (d->n_merges == 0) return nx_fail(err, "%s: tokenizer.ggml.merges is missing or empty (a BPE vocabulary needs merges)", name);
    if (!nx_bpe_merges_init(&t->merges, d->n_merges, err)) return false;
    char buf[512];
    for (uint32_t r = 0; r < d->n_merges; r++) {
        nx_str m = d->merges[r];
        /* split at the first space after the first character (llama.cpp: find(' ', 1)) */
        size_t sp = 0;
        for (size_t i = 1; i < m.len; i++)
            if (m.ptr[i] == ' ') { sp = i; break; }
        int shown = (int)NX_MIN(m.len, (uint64_t)80);
        if (sp == 0) return nx_fail(err, "%s: merge %u '%.*s' is not of the form 'left right'", name, r, shown, m.ptr);
        int32_t l = nx_tokenizer_find(t, m.ptr, sp), rt = nx_tokenizer_find(t, m.ptr + sp + 1, m.len - sp - 1);
        if (m.len - 1 > sizeof buf) return nx_fail(err, "%s: merge %u is %llu bytes long", name, r, (unsigned long long)m.len);
        memcpy(buf, m.ptr, sp);
        memcpy(buf + sp, m.ptr + sp + 1, m.len - sp - 1);
        int32_t res = nx_tokenizer_find(t, buf, m.len - 1);
        if (l < 0 || rt < 0 || res < 0)
            return nx_fail(err, "%s: merge %u '%.*s': %s is not in the vocabulary", name, r, shown, m.ptr,
                           l < 0 ? "the left part" : rt < 0 ? "the right part" : "the merged token");
        nx_bpe_merges_add(&t->merges, l, rt, r, res);
    }
    for (unsigned b = 0; b < 256; b++) {
        char u[4];
        int n = nx_utf8_encode(bt->to_cp[b], u);
        t->byte_token[b] = nx_tokenizer_find(t, u, (size_t)n);
        if (t->byte_token[b] < 0)
            return nx_fail(err, "%s: no token for byte 0x%02X (byte-level symbol '%.*s'): not a byte-level BPE vocabulary", name, b, n, u);
    }
    return true;
}

static int cmp_special(const void *a, const void *b) {
    const nx_special *x = a, *y = b;
    unsigned char fx = (unsigned char)x->text[0], fy = (unsigned char)y->text[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static bool build_specials(nx_tokenizer *t, nx_err *err) {
    uint32_t n = 0;
    for (uint32_t id = 0; id < t->n_vocab; id++)
        if ((t->types[id] == NX_TOKEN_CONTROL || t->types[id] == NX_TOKEN_USER_DEFINED) && t->text_off[id + 1] - t->text_off[id] > 1) n++;
    t->specials = nx_calloc(n ? n : 1, sizeof *t->specials, "special token list", err);
    if (!t->specials) return false;
    for (uint32_t id = 0; id < t->n_vocab; id++) {
        uint32_t len = t->text_off[id + 1] - t->text_off[id] - 1;
        if ((t->types[id] == NX_TOKEN_CONTROL || t->types[id] == NX_TOKEN_USER_DEFINED) && len > 0)
            t->specials[t->n_specials++] = (nx_special){(int32_t)id, len, t->text + t->text_off[id], t->types[id] == NX_TOKEN_USER_DEFINED};
    }
    qsort(t->specials, t->n_specials, sizeof *t->specials, cmp_special);
    uint32_t i = 0;
    for (unsigned b = 0; b <= 256; b++) {
        while (b < 256 && i < t->n_specials && (unsigned char)t->specials[i].text[0] < b) i++;
        t->special_start[b] = b < 256 ? i : t->n_specials;
    }
    return true;
}

/* Id of an added (CONTROL or USER_DEFINED) token spelled `name`, -1 if none.  Deliberate
 * difference from llama.cpp, which accepts any token: the Qwen vocabulary has a normal token
 * "</s>" (id 128247) that llama.cpp turns into a control end-of-generation token, so that "</s>"
 * in a text no longer tokenizes as HF does and ends generation mid-HTML.  UNUSED padding
 * tokens are not considered either. */
static int32_t find_added_text(const nx_tokenizer *t, const char *name) {
    int32_t id = nx_tokenizer_find(t, name, strlen(name));
    return id >= 0 && (t->types[id] == NX_TOKEN_CONTROL || t->types[id] == NX_TOKEN_USER_DEFINED) ? id : -1;
}

/* Like find_added_text for the first name found; as llama.cpp does, a token detected this way
 * is made CONTROL (only matters for USER_DEFINED ones). */
static int32_t find_first_text(nx_tokenizer *t, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = find_added_text(t, names[i]);
        if (id >= 0) {
            t->types[id] = NX_TOKEN_CONTROL;
            return id;
        }
    }
    return -1;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* The end-of-generation set, following llama.cpp's vocab loader (text lists copied as facts). */
static bool build_eog(nx_tokenizer *t, const nx_vocab_desc *d, nx_err *err) {
    static const char *const eot_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                            "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>"};
    static const char *const fim_pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
    static const char *const fim_rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"};
    static const char *const fim_sep_names[] = {"<|file_sep|>"};
    static const char *const eog_names[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
                                            "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>",
                                            "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>",
                                            "<turn|>", "<|tool_response>", "[e~["};
    if (t->eot < 0) t->eot = find_first_text(t, eot_names, NX_ARRAY_LEN(eot_names));
    int32_t fim_pad = d->fim_pad_id >= 0 ? d->fim_pad_id : find_first_text(t, fim_pad_names, NX_ARRAY_LEN(fim_pad_names));
    int32_t fim_rep = d->fim_rep_id >= 0 ? d->fim_rep_id : find_first_text(t, fim_rep_names, NX_ARRAY_LEN(fim_rep_names));
    int32_t fim_sep = d->fim_sep_id >= 0 ? d->fim_sep_id : find_first_text(t, fim_sep_names, NX_ARRAY_LEN(fim_sep_names));
    size_t cap = NX_ARRAY_LEN(eog_names) + 8;
    t->eog = nx_malloc(cap * sizeof *t->eog, "end-of-generation list", err);
    if (!t->eog) return false;
    int32_t cand[8] = {fim_pad, fim_rep, fim_sep, t->eos, t->eot, t->eom, -1, -1};
    for (size_t i = 0; i < NX_ARRAY_LEN(eog_names); i++) {
        int32_t id = find_first_text(t, &eog_names[i], 1);
        if (id >= 0) t->eog[t->n_eog++] = id;
    }
    for (size_t i = 0; i < 8; i++)
        if (cand[i] >= 0 && (uint32_t)cand[i] < t->n_vocab) t->eog[t->n_eog++] = cand[i];
    qsort(t->eog, t->n_eog, sizeof *t->eog, cmp_i32);
    uint32_t k = 0;
    for (uint32_t i = 0; i < t->n_eog; i++)
        if (k == 0 || t->eog[k - 1] != t->eog[i]) t->eog[k++] = t->eog[i];
    t->n_eog = k;
    return true;
}

static bool check_id(int32_t id, uint32_t n_vocab, const char *name, const char *what, nx_err *err) {
    if (id < -1 || (id >= 0 && (uint32_t)id >= n_vocab))
        return nx_fail(err, "%s: %s %d is out of range (vocabulary has %u tokens)", name, what, (int)id, n_vocab);
    return true;
}

bool nx_tokenizer_create(nx_tokenizer **out, const nx_vocab_desc *d, nx_err *err) {
    *out = NULL;
    const char *name = d->name ? d->name : "vocabulary";
    if (d->n_tokens == 0 || !d->tokens) return nx_fail(err, "%s: no tokens", name);
    if (d->n_tokens > INT32_MAX / 2) return nx_fail(err, "%s: %u tokens exceed the limit", name, d->n_tokens);
    if (d->n_merges && !d->merges) return nx_fail(err, "%s: merges count without merges", name);
    const char *pre = d->pre ? d->pre : "qwen2";
    nx_pretok pt;
    if (!nx_pretok_from_name(pre, strlen(pre), &pt))
        return nx_fail(err, "%s: pre-tokenizer '%s' is not supported (supported: qwen2 and its aliases, qwen35)", name, pre);
    const int32_t ids[] = {d->bos_id, d->eos_id, d->eot_id, d->eom_id, d->pad_id, d->fim_pad_id, d->fim_rep_id, d->fim_sep_id};
    const char *id_names[] = {"bos_token_id", "eos_token_id", "eot_token_id", "eom_token_id", "padding_token_id",
                              "fim_pad_token_id", "fim_rep_token_id", "fim_sep_token_id"};
    for (size_t i = 0; i < NX_ARRAY_LEN(ids); i++)
        if (!check_id(ids[i], d->n_tokens, name, id_names[i], err)) return false;

    nx_tokenizer *t = nx_calloc(1, sizeof *t, "tokenizer", err);
    if (!t) return false;
    t->n_vocab = d->n_tokens;
    t->pretok = pt;
    t->bos = d->bos_id;
    t->eos = d->eos_id;
    t->eot = d->eot_id;
    t->eom = d->eom_id;
    t->pad = d->pad_id;
    t->add_bos = d->add_bos;
    t->add_eos = d->add_eos;
    /* both supported pre-tokenizers come from tokenizer.json files declaring an NFC normalizer */
    t->nfc = d->normalizer != NX_NORM_NONE;
    byte_tables bt;
    byte_tables_init(&bt);
    if (!build_texts(t, d, &bt, name, err) || !build_index(t, name, err) || !build_merges(t, d, &bt, name, err) ||
        !build_eog(t, d, err) || !build_specials(t, err) || !nx_pretokenizer_create(&t->pre, pt, err) ||
        !nx_bpe_state_init(&t->bpe, err)) {
        nx_tokenizer_free(t);
        return false;
    }
    *out = t;
    return true;
}

/* ---- accessors ---------------------------------------------------------------------------- */

uint32_t nx_tokenizer_n_vocab(const nx_tokenizer *t) { return t->n_vocab; }
nx_pretok nx_tokenizer_pretok(const nx_tokenizer *t) { return t->pretok; }
bool nx_tokenizer_nfc(const nx_tokenizer *t) { return t->nfc; }
void nx_tokenizer_set_nfc(nx_tokenizer *t, bool nfc) { t->nfc = nfc; }
int32_t nx_tokenizer_bos(const nx_tokenizer *t) { return t->bos; }
int32_t nx_tokenizer_eos(const nx_tokenizer *t) { return t->eos; }
int32_t nx_tokenizer_eot(const nx_tokenizer *t) { return t->eot; }
int32_t nx_tokenizer_pad(const nx_tokenizer *t) { return t->pad; }
bool nx_tokenizer_add_bos(const nx_tokenizer *t) { return t->add_bos; }

bool nx_tokenizer_is_eog(const nx_tokenizer *t, int32_t id) {
    return bsearch(&id, t->eog, t->n_eog, sizeof *t->eog, cmp_i32) != NULL;
}

const int32_t *nx_tokenizer_eog_ids(const nx_tokenizer *t, uint32_t *n) {
    *n = t->n_eog;
    return t->eog;
}

const char *nx_tokenizer_token_text(const nx_tokenizer *t, int32_t id, uint32_t *len) {
    if (id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    if (len) *len = t->text_off[id + 1] - t->text_off[id] - 1;
    return t->text + t->text_off[id];
}

int32_t nx_tokenizer_token_type(const nx_tokenizer *t, int32_t id) {
    return id < 0 || (uint32_t)id >= t->n_vocab ? 0 : t->types[id];
}

/* ---- encoding ----------------------------------------------------------------------------- */

void nx_tokens_free(nx_tokens *v) {
    free(v->ids);
    memset(v, 0, sizeof *v);
}

static bool push_id(nx_tokens *out, int32_t id, nx_err *err) {
    if (out->n == out->cap) {
        size_t cap = out->cap ? out->cap * 2 : 256;
        int32_t *v = realloc(out->ids, cap * sizeof *v);
        if (!v) return nx_fail(err, "out of memory for %zu token ids", cap);
        out->ids = v;
        out->cap = cap;
    }
    out->ids[out->n++] = id;
    return true;
}

typedef struct {
    nx_tokenizer *t;
    nx_tokens *out;
} piece_ctx;

static bool on_piece(void *user, const char *piece, size_t len, nx_err *err) {
    piece_ctx *c = user;
    return nx_bpe_encode_piece(&c->t->bpe, &c->t->merges, c->t->byte_token, piece, len, &c->out->ids, &c->out->n,
                               &c->out->cap, err);
}

/* A string whose code points are all below U+0300 is NFC: none of them has a decomposition
 * that NFC keeps apart or a non-zero combining class, and none composes with what precedes it
 * (the first code points that do, the combining diacritics, start at U+0300 = CC 80). */
static bool surely_nfc(const char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)p[i] >= 0xCC) return false;
    return true;
}

/* Code points NFC leaves as they are and never merges into what precedes them (combining class
 * 0, NFC_Quick_Check = Yes, never the second code point of a canonical composition): below
 * U+0300, hiragana and katakana letters, CJK unified ideographs, Hangul syllables.  Text splits
 * before each into segments that normalise independently: NFC(xy) = NFC(x) NFC(y) when y
 * starts with one (Unicode's normalisation "stable code points"). */
static bool nfc_boundary(uint32_t cp) {
    return cp < 0x300 || (cp >= 0x3041 && cp <= 0x3096) || (cp >= 0x30A1 && cp <= 0x30FA) ||
           (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3);
}

/* Appends NFC(p[0..n)) to t->nfc_out. */
static bool nfc_append(nx_tokenizer *t, const char *p, size_t n, nx_err *err) {
    const utf8proc_option_t opt = UTF8PROC_STABLE | UTF8PROC_COMPOSE;
    for (;;) {
        utf8proc_ssize_t m = utf8proc_decompose((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, t->norm,
                                                (utf8proc_ssize_t)t->norm_cap, opt);
        if (m < 0) return nx_fail(err, "Unicode normalisation (NFC) failed: %s", utf8proc_errmsg(m));
        if ((size_t)m <= t->norm_cap) {
            /* composes, then writes UTF-8 over the code points (never longer than 4 bytes each) */
            m = utf8proc_reencode(t->norm, m, opt);
            if (m < 0) return nx_fail(err, "Unicode normalisation (NFC) failed: %s", utf8proc_errmsg(m));
            return nx_buf_append(&t->nfc_out, t->norm, (size_t)m, err);
        }
        size_t cap = NX_MAX((size_t)m, 2 * t->norm_cap);
        utf8proc_int32_t *b = realloc(t->norm, cap * sizeof *b);
        if (!b) return nx_fail(err, "out of memory normalising %zu bytes of text", n);
        t->norm = b;
        t->norm_cap = cap;
    }
}

/* Pre-tokenizes (and BPE-encodes) one fragment between added tokens, in NFC when t->nfc: only
 * the segments (see nfc_boundary) holding another code point go through libutf8proc. */
static bool encode_fragment(nx_tokenizer *t, const char *p, size_t n, piece_ctx *ctx, nx_err *err) {
    if (!t->nfc || surely_nfc(p, n)) return nx_pretokenize(t->pre, p, n, on_piece, ctx, err);
    if (n > (size_t)PTRDIFF_MAX / 8) return nx_fail(err, "text of %zu bytes is too long to normalise", n);
    t->nfc_out.len = 0;
    size_t seg = 0, i = 0;
    bool dirty = false; /* the segment [seg, i) holds a code point that may change */
    while (i <= n) {
        int l = 1;
        bool boundary = i == n;
        if (!boundary) {
            const unsigned char *u = (const unsigned char *)p + i;
            l = *u < 0x80 ? 1 : nx_utf8_char_len(u, n - i); /* valid: checked by nx_tokenize */
            boundary = *u < 0x80 || nfc_boundary(nx_utf8_decode(u, l));
        }
        if (boundary && i > seg) {
            if (!(dirty ? nfc_append(t, p + seg, i - seg, err) : nx_buf_append(&t->nfc_out, p + seg, i - seg, err)))
                return false;
            seg = i;
            dirty = false;
        }
        if (!boundary) dirty = true;
        i += (size_t)l;
    }
    return nx_pretokenize(t->pre, t->nfc_out.data, t->nfc_out.len, on_piece, ctx, err);
}

bool nx_tokenize(nx_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                 nx_tokens *out, nx_err *err) {
    size_t valid = nx_utf8_valid_prefix(text, len);
    if (valid != len)
        return nx_fail(err, "text is not valid UTF-8: bad byte 0x%02X at offset %zu", (unsigned char)text[valid], valid);
    if (add_bos && t->add_bos && t->bos >= 0 && !push_id(out, t->bos, err)) return false;
    piece_ctx ctx = {t, out};
    size_t frag = 0, pos = 0;
    while (pos < len) {
        unsigned char c = (unsigned char)text[pos];
        bool matched = false;
        /* leftmost-longest: scanning left to right, the candidates of this first byte are
         * sorted longest first */
        for (uint32_t i = t->special_start[c]; i < t->special_start[c + 1]; i++) {
            const nx_special *s = &t->specials[i];
            if ((s->always || parse_special) && s->len <= len - pos && !memcmp(text + pos, s->text, s->len)) {
                if (pos > frag && !encode_fragment(t, text + frag, pos - frag, &ctx, err)) return false;
                if (!push_id(out, s->id, err)) return false;
                pos += s->len;
                frag = pos;
                matched = true;
                break;
            }
        }
        if (!matched) pos++;
    }
    if (len > frag && !encode_fragment(t, text + frag, len - frag, &ctx, err)) return false;
    if (add_bos && t->add_eos && t->eos >= 0 && !push_id(out, t->eos, err)) return false;
    return true;
}

/* ---- decoding ----------------------------------------------------------------------------- */

void nx_buf_free(nx_buf *b) {
    free(b->data);
    memset(b, 0, sizeof *b);
}

bool nx_buf_append(nx_buf *b, const void *p, size_t n, nx_err *err) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d) return nx_fail(err, "out of memory for %zu bytes of text", cap);
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
    return true;
}

bool nx_token_to_piece(const nx_tokenizer *t, int32_t id, bool special, nx_buf *out, nx_err *err) {
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return nx_fail(err, "token id %d is out of range (vocabulary has %u tokens)", (int)id, t->n_vocab);
    int type = t->types[id];
    if (!special && (type == NX_TOKEN_CONTROL || type == NX_TOKEN_UNKNOWN)) return nx_buf_append(out, "", 0, err);
    return nx_buf_append(out, t->dec + t->dec_off[id], t->dec_off[id + 1] - t->dec_off[id], err);
}

bool nx_detokenize(const nx_tokenizer *t, const int32_t *ids, size_t n, bool special, nx_buf *out, nx_err *err) {
    if (!nx_buf_append(out, "", 0, err)) return false;
    for (size_t i = 0; i < n; i++)
        if (!nx_token_to_piece(t, ids[i], special, out, err)) return nx_fail_prefix(err, "decoding token %zu", i);
    return true;
}

/* ---- streaming detokenizer ---------------------------------------------------------------- */

void nx_detok_stream_init(nx_detok_stream *s, const nx_tokenizer *t, bool special) {
    memset(s, 0, sizeof *s);
    s->tok = t;
    s->special = special;
}

static const char REPLACEMENT[] = "\xEF\xBF\xBD"; /* U+FFFD */

/* Emits every complete character of pending+bytes; keeps an incomplete valid tail (<= 3
 * bytes) in s->pending; replaces each invalid byte by U+FFFD. */
static bool stream_feed(nx_detok_stream *s, const unsigned char *p, size_t n, nx_buf *out, nx_err *err) {
    for (size_t i = 0; i < n; i++) {
        s->pending[s->n_pending++] = p[i];
        int k = nx_utf8_char_len(s->pending, s->n_pending);
        if (k < 0) continue; /* valid prefix, wait for more */
        if (k > 0) {
            if (!nx_buf_append(out, s->pending, (size_t)k, err)) return false;
            s->n_pending = 0;
            continue;
        }
        /* invalid: the first pending byte can never start a character; replace it and
         * re-examine the bytes after it */
        if (!nx_buf_append(out, REPLACEMENT, 3, err)) return false;
        unsigned char rest[4];
        unsigned nr = s->n_pending - 1;
        memcpy(rest, s->pending + 1, nr);
        s->n_pending = 0;
        if (!stream_feed(s, rest, nr, out, err)) return false;
    }
    return true;
}

bool nx_detok_stream_push(nx_detok_stream *s, int32_t id, nx_buf *out, nx_err *err) {
    const nx_tokenizer *t = s->tok;
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return nx_fail(err, "token id %d is out of range (vocabulary has %u tokens)", (int)id, t->n_vocab);
    if (!nx_buf_append(out, "", 0, err)) return false;
    int type = t->types[id];
    if (!s->special && (type == NX_TOKEN_CONTROL || type == NX_TOKEN_UNKNOWN)) return true;
    return stream_feed(s, (const unsigned char *)t->dec + t->dec_off[id], t->dec_off[id + 1] - t->dec_off[id], out, err);
}

bool nx_detok_stream_flush(nx_detok_stream *s, nx_buf *out, nx_err *err) {
    if (!nx_buf_append(out, "", 0, err)) return false;
    if (s->n_pending == 0) return true;
    s->n_pending = 0;
    return nx_buf_append(out, REPLACEMENT, 3, err);
}
