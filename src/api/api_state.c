/* api_state.c - sequence states of the public API (include/nextn.h, "sequence state"): taking and
 * restoring checkpoints of a context's or a generator's sequence, and the state file format.
 *
 * A nextn_state wraps an nx_spec_seq_state (spec.h): for a plain context only its target part
 * (an nx_seq_ckpt, seq_ckpt.h) is used; from a generator, the MTP cache and the driver's rows
 * too.  It records the model's fingerprint, so a state never restores into another model.
 *
 * File format (version 2, little-endian, docs/forward.md "Sequence state files"):
 *   header (112 bytes)
 *     0  char[8] magic "NXSTATE\0"        8  u32 version          12 u32 flags (FL_*)
 *     16 u64 model fingerprint            24 u64 MTP fingerprint (0: no MTP part)
 *     32 i32 pos                          36 i32 n_ctx of the source context
 *     40 u32 kv types (K | V << 8)        44 u32 GDN layers
 *     48 u64 conv floats per layer        56 u64 delta-state floats per layer
 *     64 u32 attention layers             68 u32 K/V values per cell
 *     72 i32 MTP cells                    76 u32 MTP attention layers  80 u32 MTP values per cell
 *     84 i32 MTP base                     88 u32 MTP stale             92 i32 backlog rows
 *     96 i32 E (hidden size)              100 i32 tokens             104 u64 payload bytes
 *   payload, in this order: tokens i32[tokens]; conv f32[layers][conv]; delta f32[layers][delta];
 *     K then V cells [attention layers][pos][values] in the K / V types; with an MTP part: MTP K,
 *     MTP V cells; with a driver part (FL_SPEC): pending hidden f32[E], backlog tokens
 *     i32[rows], backlog hidden f32[rows][E]
 *   u64 checksum of every byte before it (header and payload; see hash_*).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "api/api_internal.h"
#include "base/common.h"
#include "base/file_safe.h"
#include "forward/ctx_internal.h"
#include "forward/seq_ckpt.h"
#include "gguf/gguf.h"
#include "nextn.h"
#include "spec/spec.h"

#define STATE_MAGIC "NXSTATE"   /* 8 bytes with the NUL */
#define STATE_VERSION 2u
#define HEADER_BYTES 112
#define FL_SPEC 1u              /* driver rows (pending hidden, backlog) present */
#define FL_MTP 2u               /* MTP cells present */
#define FL_TOKENS 4u

struct nextn_state {
    nextn_state_kind kind;
    bool from_spec;             /* taken from a generator: the driver rows are meaningful */
    nx_spec_seq_state s;        /* s.tgt: the target context; s.mtp etc. from a generator */
    uint64_t fingerprint;       /* model */
    uint64_t mtp_fingerprint;   /* MTP weights (0: none) */
    int32_t n_ctx;              /* of the source context */
    int32_t *tokens;
    int32_t n_tokens;           /* 0 or s.tgt.pos */
};

static bool fail(nextn_error *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail(nextn_error *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return false;
}

/* ---- hashing ------------------------------------------------------------------------------- */

/* The checksum: FNV-1a's step over 64-bit little-endian words (a partial word waits for more
 * bytes), then the length.  Each step is a bijection of the running value, so a file differing
 * in any one word always hashes differently. */
typedef struct hasher {
    uint64_t h, n;
    uint8_t buf[8];
    int nbuf;
} hasher;

static void hash_init(hasher *x) { memset(x, 0, sizeof *x), x->h = 0xcbf29ce484222325ULL; }
static inline void hash_word(hasher *x, uint64_t w) { x->h = (x->h ^ w) * 0x100000001b3ULL; }
static void hash_bytes(hasher *x, const void *p, size_t n) {
    const uint8_t *b = p;
    x->n += n;
    while (n && x->nbuf) {
        x->buf[x->nbuf++] = *b++, n--;
        if (x->nbuf == 8) {
            uint64_t w;
            memcpy(&w, x->buf, 8);
            hash_word(x, w);
            x->nbuf = 0;
        }
    }
    for (; n >= 8; b += 8, n -= 8) {
        uint64_t w;
        memcpy(&w, b, 8);
        hash_word(x, w);
    }
    while (n) x->buf[x->nbuf++] = *b++, n--;
}
static uint64_t hash_final(const hasher *x) {
    hasher y = *x;
    if (y.nbuf) {
        memset(y.buf + y.nbuf, 0, (size_t)(8 - y.nbuf));
        uint64_t w;
        memcpy(&w, y.buf, 8);
        hash_word(&y, w);
    }
    hash_word(&y, y.n);
    return y.h;
}

/* ---- taking and restoring ------------------------------------------------------------------ */

static nextn_state *state_get(nextn_state **st, nextn_error *err) {
    if (!*st) {
        nx_err ie;
        *st = nx_calloc(1, sizeof **st, "state", &ie);
        if (!*st) nx_api_pass(err, &ie);
    }
    return *st;
}

void nextn_state_free(nextn_state *st) {
    if (!st) return;
    nx_spec_seq_state_free(&st->s);
    free(st->tokens);
    free(st);
}

static void clear_tokens(nextn_state *st) { st->n_tokens = 0; }

bool nextn_state_take(nextn_state **out, const nextn_context *ctx, int32_t seq, nextn_state_kind kind,
                      nextn_error *err) {
    if (!out || !ctx) return fail(err, "state: %s is NULL", out ? "context" : "state pointer");
    if (kind != NEXTN_STATE_FULL && kind != NEXTN_STATE_IN_PLACE) return fail(err, "state: unknown kind %d", (int)kind);
    nextn_state *st = state_get(out, err);
    if (!st) return false;
    nx_err ie;
    const nx_ctx *c = nx_api_ctx(ctx);
    if (!nx_seq_ckpt_take(&st->s.tgt, c, seq, kind == NEXTN_STATE_FULL, &ie)) return nx_api_pass(err, &ie);
    st->kind = kind;
    st->from_spec = false;
    st->s.has_mtp = false;
    st->s.n_mir = 0;
    st->s.base = 0;
    st->s.stale = false;
    st->fingerprint = nx_api_model_fingerprint(nx_api_ctx_model(ctx));
    st->mtp_fingerprint = 0;
    st->n_ctx = nx_ctx_params_of(c)->n_ctx;
    clear_tokens(st);
    return true;
}

bool nextn_spec_state_take(nextn_state **out, const nextn_spec *s, int32_t seq, nextn_state_kind kind,
                           nextn_error *err) {
    if (!out || !s) return fail(err, "state: %s is NULL", out ? "generator" : "state pointer");
    if (kind != NEXTN_STATE_FULL && kind != NEXTN_STATE_IN_PLACE) return fail(err, "state: unknown kind %d", (int)kind);
    nextn_state *st = state_get(out, err);
    if (!st) return false;
    nx_err ie;
    const nx_spec *drv = nx_api_spec_driver(s);
    if (!nx_spec_seq_take(&st->s, drv, seq, kind == NEXTN_STATE_FULL, &ie)) return nx_api_pass(err, &ie);
    st->kind = kind;
    st->from_spec = true;
    st->fingerprint = nx_api_model_fingerprint(nx_api_spec_model(s));
    st->mtp_fingerprint = st->s.has_mtp ? nx_api_spec_mtp_fingerprint(s) : 0;
    st->n_ctx = nx_ctx_params_of(nx_api_spec_ctx(s))->n_ctx;
    clear_tokens(st);
    return true;
}

static bool check_model(const nextn_state *st, const nextn_model *m, nextn_error *err) {
    if (!st || !st->s.tgt.conv) return fail(err, "restore: the state is empty (take or load one first)");
    const uint64_t fp = nx_api_model_fingerprint(m);
    if (st->fingerprint != fp)
        return fail(err, "restore: the state was taken from another model (fingerprint %016llx, this model %016llx)",
                    (unsigned long long)st->fingerprint, (unsigned long long)fp);
    return true;
}

bool nextn_state_restore(nextn_context *ctx, int32_t seq, const nextn_state *st, nextn_error *err) {
    if (!ctx) return fail(err, "restore: context is NULL");
    if (!check_model(st, nx_api_ctx_model(ctx), err)) return false;
    nx_err ie;
    if (!nx_seq_ckpt_restore(nx_api_ctx(ctx), seq, &st->s.tgt, &ie)) return nx_api_pass(err, &ie);
    return true;
}

bool nextn_spec_state_restore(nextn_spec *s, int32_t seq, const nextn_state *st, nextn_error *err) {
    if (!s) return fail(err, "restore: generator is NULL");
    if (!check_model(st, nx_api_spec_model(s), err)) return false;
    const uint64_t mfp = nx_api_spec_mtp_fingerprint(s);
    if (st->s.has_mtp && mfp && st->mtp_fingerprint != mfp)
        return fail(err, "restore: the state's MTP cache was made by other MTP weights (fingerprint %016llx, this "
                    "generator's %016llx)", (unsigned long long)st->mtp_fingerprint, (unsigned long long)mfp);
    nx_err ie;
    if (st->from_spec) {
        if (!nx_spec_seq_restore(nx_api_spec_driver(s), seq, &st->s, &ie)) return nx_api_pass(err, &ie);
        return true;
    }
    /* a plain context's state: no MTP part, no driver rows (zeros) */
    nx_spec_seq_state tmp = st->s;
    tmp.has_mtp = false;
    tmp.n_mir = 0;
    tmp.pending_h = NULL;
    if (!nx_spec_seq_restore(nx_api_spec_driver(s), seq, &tmp, &ie)) return nx_api_pass(err, &ie);
    return true;
}

bool nextn_spec_seq_keep(nextn_spec *s, int32_t seq, nextn_error *err) {
    nx_err ie;
    if (!s) return fail(err, "keep: generator is NULL");
    if (!nx_spec_seq_keep(nx_api_spec_driver(s), seq, &ie)) return nx_api_pass(err, &ie);
    return true;
}

int32_t nextn_spec_seq_n_past(const nextn_spec *s, int32_t seq) {
    return s ? nx_ctx_n_past(nx_api_spec_ctx(s), seq) : 0;
}

int32_t nextn_state_pos(const nextn_state *st) { return st ? st->s.tgt.pos : 0; }
nextn_state_kind nextn_state_kind_of(const nextn_state *st) { return st ? st->kind : NEXTN_STATE_FULL; }
bool nextn_state_has_mtp(const nextn_state *st) { return st && st->s.has_mtp; }

uint64_t nextn_state_size(const nextn_state *st) {
    if (!st) return 0;
    return (st->from_spec ? nx_spec_seq_state_bytes(&st->s) : nx_seq_ckpt_bytes(&st->s.tgt)) +
           (uint64_t)st->n_tokens * sizeof(int32_t);
}

uint64_t nextn_state_size_for(const nextn_context *ctx, nextn_state_kind kind, int32_t pos) {
    return ctx ? nx_seq_ckpt_bytes_for(nx_api_ctx(ctx), pos < 0 ? 0 : pos, kind == NEXTN_STATE_FULL) : 0;
}

uint64_t nextn_spec_state_size_for(const nextn_spec *s, nextn_state_kind kind, int32_t pos) {
    return s ? nx_spec_seq_state_bytes_for(nx_api_spec_driver(s), pos < 0 ? 0 : pos, kind == NEXTN_STATE_FULL) : 0;
}

bool nextn_state_set_tokens(nextn_state *st, const int32_t *tokens, int32_t n, nextn_error *err) {
    if (!st) return fail(err, "state: NULL");
    if (n != st->s.tgt.pos)
        return fail(err, "state: %d tokens given, the state holds %d positions", n, st->s.tgt.pos);
    if (n > 0 && !tokens) return fail(err, "state: tokens is NULL");
    int32_t *t = realloc(st->tokens, (size_t)(n > 0 ? n : 1) * sizeof *t);
    if (!t) return fail(err, "state: out of memory for %d tokens", n);
    if (n > 0) memcpy(t, tokens, (size_t)n * sizeof *t);
    st->tokens = t;
    st->n_tokens = n;
    return true;
}

const int32_t *nextn_state_tokens(const nextn_state *st, int32_t *n) {
    if (n) *n = st && st->n_tokens > 0 ? st->n_tokens : 0;
    return st && st->n_tokens > 0 ? st->tokens : NULL;
}

/* ---- files --------------------------------------------------------------------------------- */

typedef struct hdr {
    uint32_t version, flags;
    uint64_t fp, mtp_fp;
    int32_t pos, n_ctx;
    uint32_t kv_type, n_gdn;
    uint64_t conv_n, ssm_n;
    uint32_t kv_layers, kv_dim;
    int32_t mtp_pos;
    uint32_t mtp_layers, mtp_dim;
    int32_t base;
    uint32_t stale;
    int32_t n_mir, E, n_tokens;
    uint64_t payload;
} hdr;

static void put32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get32(const uint8_t *b) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)b[i] << (8 * i);
    return v;
}
static uint64_t get64(const uint8_t *b) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

static void hdr_encode(const hdr *h, uint8_t *b) {
    memset(b, 0, HEADER_BYTES);
    memcpy(b, STATE_MAGIC, 8);
    put32(b + 8, h->version);
    put32(b + 12, h->flags);
    put64(b + 16, h->fp);
    put64(b + 24, h->mtp_fp);
    put32(b + 32, (uint32_t)h->pos);
    put32(b + 36, (uint32_t)h->n_ctx);
    put32(b + 40, h->kv_type);
    put32(b + 44, h->n_gdn);
    put64(b + 48, h->conv_n);
    put64(b + 56, h->ssm_n);
    put32(b + 64, h->kv_layers);
    put32(b + 68, h->kv_dim);
    put32(b + 72, (uint32_t)h->mtp_pos);
    put32(b + 76, h->mtp_layers);
    put32(b + 80, h->mtp_dim);
    put32(b + 84, (uint32_t)h->base);
    put32(b + 88, h->stale);
    put32(b + 92, (uint32_t)h->n_mir);
    put32(b + 96, (uint32_t)h->E);
    put32(b + 100, (uint32_t)h->n_tokens);
    put64(b + 104, h->payload);
}

static void hdr_decode(hdr *h, const uint8_t *b) {
    h->version = get32(b + 8);
    h->flags = get32(b + 12);
    h->fp = get64(b + 16);
    h->mtp_fp = get64(b + 24);
    h->pos = (int32_t)get32(b + 32);
    h->n_ctx = (int32_t)get32(b + 36);
    h->kv_type = get32(b + 40);
    h->n_gdn = get32(b + 44);
    h->conv_n = get64(b + 48);
    h->ssm_n = get64(b + 56);
    h->kv_layers = get32(b + 64);
    h->kv_dim = get32(b + 68);
    h->mtp_pos = (int32_t)get32(b + 72);
    h->mtp_layers = get32(b + 76);
    h->mtp_dim = get32(b + 80);
    h->base = (int32_t)get32(b + 84);
    h->stale = get32(b + 88);
    h->n_mir = (int32_t)get32(b + 92);
    h->E = (int32_t)get32(b + 96);
    h->n_tokens = (int32_t)get32(b + 100);
    h->payload = get64(b + 104);
}

/* The payload's sections as (pointer, bytes), in file order; pointers may be NULL when only
 * sizes are wanted.  Returns false on a size overflow. */
typedef struct section {
    void *p;
    uint64_t n;
} section;

/* The header's kv_type field: the K cache type (nx_kv_type) in bits 0-7, the V cache type in bits
 * 8-15 (format version 2; version 1 had one type for both). */
static nx_kv_type kv_field_k(uint32_t f) { return (nx_kv_type)(f & 0xff); }
static nx_kv_type kv_field_v(uint32_t f) { return (nx_kv_type)((f >> 8) & 0xff); }
static uint32_t kv_field(nx_kv_type k, nx_kv_type v) { return (uint32_t)k | ((uint32_t)v << 8); }
static bool kv_field_ok(uint32_t f, uint32_t kv_dim) {
    return f <= 0xffff && nx_kv_type_valid((int)kv_field_k(f)) && nx_kv_type_valid((int)kv_field_v(f)) &&
           kv_dim % (uint32_t)nx_kv_type_block(kv_field_k(f)) == 0 && kv_dim % (uint32_t)nx_kv_type_block(kv_field_v(f)) == 0;
}
/* Bytes of n elements of the K (which = 0) or V (which = 1) cache. */
static uint64_t kv_bytes_of(uint32_t f, int which, uint64_t n) {
    return nx_kv_type_bytes(which ? kv_field_v(f) : kv_field_k(f), (size_t)n);
}

static bool mul3(uint64_t a, uint64_t b, uint64_t c, uint64_t *out) {
    uint64_t t;
    return nx_mul_ok(a, b, &t) && nx_mul_ok(t, c, out);
}

static int sections_of(const hdr *h, const nx_spec_seq_state *s, int32_t *tokens, section *sec, bool *ok) {
    int n = 0;
    uint64_t b = 0;
    *ok = true;
    if (h->flags & FL_TOKENS) sec[n++] = (section){tokens, (uint64_t)h->n_tokens * 4};
    *ok = *ok && mul3(h->n_gdn, h->conv_n, 4, &b);
    sec[n++] = (section){s ? s->tgt.conv : NULL, b};
    *ok = *ok && mul3(h->n_gdn, h->ssm_n, 4, &b);
    sec[n++] = (section){s ? s->tgt.ssm : NULL, b};
    uint64_t rows = 0;
    for (int w = 0; w < 2; w++) { /* cells are whole rows of kv_dim (checked by kv_field_ok) */
        *ok = *ok && nx_mul_ok(h->kv_layers, (uint64_t)h->pos, &rows) &&
              nx_mul_ok(rows, kv_bytes_of(h->kv_type, w, h->kv_dim), &b);
        sec[n++] = (section){s ? (w ? s->tgt.v : s->tgt.k) : NULL, b};
    }
    if (h->flags & FL_MTP) {
        for (int w = 0; w < 2; w++) {
            *ok = *ok && nx_mul_ok(h->mtp_layers, (uint64_t)h->mtp_pos, &rows) &&
                  nx_mul_ok(rows, kv_bytes_of(h->kv_type, w, h->mtp_dim), &b);
            sec[n++] = (section){s ? (w ? s->mtp.v : s->mtp.k) : NULL, b};
        }
    }
    if (h->flags & FL_SPEC) {
        sec[n++] = (section){s ? s->pending_h : NULL, (uint64_t)h->E * 4};
        sec[n++] = (section){s ? s->mir_tok : NULL, (uint64_t)h->n_mir * 4};
        *ok = *ok && mul3((uint64_t)h->n_mir, (uint64_t)h->E, 4, &b);
        sec[n++] = (section){s ? s->mir_h : NULL, b};
    }
    return n;
}

bool nextn_state_save(const nextn_state *st, const char *path, nextn_error *err) {
    if (!st || !st->s.tgt.conv) return fail(err, "state save: the state is empty");
    if (!path) return fail(err, "state save: path is NULL");
    if (st->kind != NEXTN_STATE_FULL || !st->s.tgt.has_kv)
        return fail(err, "state save %s: only a full state (NEXTN_STATE_FULL) can be saved; this one has no attention "
                    "cells", path);
    const nx_spec_seq_state *s = &st->s;
    hdr h = {.version = STATE_VERSION,
             .flags = (st->from_spec ? FL_SPEC : 0) | (s->has_mtp && s->mtp.has_kv ? FL_MTP : 0) |
                      (st->n_tokens > 0 ? FL_TOKENS : 0),
             .fp = st->fingerprint,
             .mtp_fp = s->has_mtp ? st->mtp_fingerprint : 0,
             .pos = s->tgt.pos,
             .n_ctx = st->n_ctx,
             .kv_type = kv_field(s->tgt.kv_type_k, s->tgt.kv_type_v),
             .n_gdn = (uint32_t)s->tgt.n_layer,
             .conv_n = s->tgt.conv_n,
             .ssm_n = s->tgt.ssm_n,
             .kv_layers = (uint32_t)s->tgt.kv_layers,
             .kv_dim = (uint32_t)s->tgt.kv_dim,
             .mtp_pos = s->has_mtp ? s->mtp.pos : 0,
             .mtp_layers = s->has_mtp ? (uint32_t)s->mtp.kv_layers : 0,
             .mtp_dim = s->has_mtp ? (uint32_t)s->mtp.kv_dim : 0,
             .base = st->from_spec ? s->base : 0,
             .stale = st->from_spec && s->stale,
             .n_mir = st->from_spec ? s->n_mir : 0,
             .E = st->from_spec ? s->E : 0,
             .n_tokens = st->n_tokens};
    section sec[12];
    bool ok;
    const int n_sec = sections_of(&h, s, st->tokens, sec, &ok);
    for (int i = 0; i < n_sec; i++) h.payload += sec[i].n;
    uint8_t hb[HEADER_BYTES];
    hdr_encode(&h, hb);

    char tmp[4096];
    nx_err ie;
    FILE *f = nx_fcreate_begin(path, tmp, sizeof tmp, &ie);
    if (!f) return fail(err, "state save: %s", ie.msg);
    hasher x;
    hash_init(&x);
    hash_bytes(&x, hb, sizeof hb);
    bool wok = fwrite(hb, 1, sizeof hb, f) == sizeof hb;
    for (int i = 0; wok && i < n_sec; i++) {
        hash_bytes(&x, sec[i].p, (size_t)sec[i].n);
        wok = sec[i].n == 0 || fwrite(sec[i].p, 1, (size_t)sec[i].n, f) == sec[i].n;
    }
    uint8_t cb[8];
    put64(cb, hash_final(&x));
    wok = wok && fwrite(cb, 1, 8, f) == 8;
    const int e = errno;
    if (!wok) snprintf(ie.msg, sizeof ie.msg, "%s: write failed: %s", path, strerror(e));
    if (!nx_fcreate_commit(f, tmp, path, wok, &ie)) return fail(err, "state save: %s", ie.msg);
    return true;
}

/* Expected model geometry (from the hyper-parameters): what a context over it would hold. */
static bool check_geometry(const char *path, const hdr *h, const nx_model *m, nextn_error *err) {
    const nx_hparams *hp = &m->hp;
    const uint64_t conv_n = (uint64_t)(hp->ssm_conv_kernel - 1) * nx_hp_conv_dim(hp);
    const uint64_t ssm_n = (uint64_t)hp->ssm_d_state * hp->ssm_d_state * hp->ssm_dt_rank;
    if (h->n_gdn != (uint32_t)m->n_gdn_layers || (h->n_gdn && (h->conv_n != conv_n || h->ssm_n != ssm_n)))
        return fail(err, "state file %s: recurrent state of %u layers x (%llu + %llu) floats, the model has %d x "
                    "(%llu + %llu)", path, h->n_gdn, (unsigned long long)h->conv_n, (unsigned long long)h->ssm_n,
                    m->n_gdn_layers, (unsigned long long)conv_n, (unsigned long long)ssm_n);
    if (h->kv_layers != (uint32_t)m->n_attn_layers || h->kv_dim != nx_hp_kv_dim(hp))
        return fail(err, "state file %s: attention cells of %u layers x %u values, the model has %d x %u", path,
                    h->kv_layers, h->kv_dim, m->n_attn_layers, nx_hp_kv_dim(hp));
    if ((h->flags & FL_MTP) && (h->mtp_layers != 1 || h->mtp_dim != nx_hp_kv_dim(hp)))
        return fail(err, "state file %s: MTP cells of %u layers x %u values, expected 1 x %u", path, h->mtp_layers,
                    h->mtp_dim, nx_hp_kv_dim(hp));
    if ((h->flags & FL_SPEC) && h->E != (int32_t)hp->n_embd)
        return fail(err, "state file %s: hidden rows of %d values, the model's are %u", path, h->E, hp->n_embd);
    return true;
}

bool nextn_state_load(nextn_state **out, const nextn_model *model, const char *path, nextn_error *err) {
    if (!out || !model || !path) return fail(err, "state load: %s is NULL", !out ? "out" : !model ? "model" : "path");
    *out = NULL;
    nx_err ie;
    FILE *f = nx_fopen_regular(path, &ie);
    if (!f) return fail(err, "state file %s", ie.msg);
    nextn_state *st = NULL;
    uint8_t hb[HEADER_BYTES];
    bool ok = false;
    if (fseek(f, 0, SEEK_END) != 0) {
        fail(err, "state file %s: cannot seek: %s", path, strerror(errno));
        goto done;
    }
    const long fsize = ftell(f);
    rewind(f);
    if (fsize < 8 || fread(hb, 1, 8, f) != 8 || memcmp(hb, STATE_MAGIC, 8) != 0) {
        fail(err, "state file %s: not a nextn state file (no \"NXSTATE\" magic)", path);
        goto done;
    }
    if (fsize < HEADER_BYTES + 8 || fread(hb + 8, 1, HEADER_BYTES - 8, f) != HEADER_BYTES - 8) {
        fail(err, "state file %s: truncated: %ld bytes, the header alone takes %d", path, fsize, HEADER_BYTES + 8);
        goto done;
    }
    hdr h;
    hdr_decode(&h, hb);
    if (h.version != STATE_VERSION) {
        fail(err, "state file %s: format version %u, this build reads version %u", path, h.version, STATE_VERSION);
        goto done;
    }
    const uint64_t fp = nx_api_model_fingerprint(model);
    if (h.fp != fp) {
        fail(err, "state file %s: saved from another model (fingerprint %016llx, this model %016llx)", path,
             (unsigned long long)h.fp, (unsigned long long)fp);
        goto done;
    }
    if ((h.flags & ~(FL_SPEC | FL_MTP | FL_TOKENS)) || !kv_field_ok(h.kv_type, h.kv_dim) ||
        ((h.flags & FL_MTP) && !kv_field_ok(h.kv_type, h.mtp_dim)) || h.pos < 0 || h.mtp_pos < 0 || h.n_mir < 0 ||
        h.base < 0 || h.stale > 1 || h.E < 0 || h.n_tokens < 0 || h.n_ctx <= h.pos ||
        ((h.flags & FL_TOKENS) && h.n_tokens != h.pos) || (!(h.flags & FL_TOKENS) && h.n_tokens != 0) ||
        ((h.flags & FL_MTP) && !(h.flags & FL_SPEC))) {
        fail(err, "state file %s: inconsistent header (flags %#x, position %d, n_ctx %d, tokens %d, backlog %d)", path,
             h.flags, h.pos, h.n_ctx, h.n_tokens, h.n_mir);
        goto done;
    }
    if (!check_geometry(path, &h, nx_api_model(model), err)) goto done;
    section sec[12];
    bool sz_ok;
    int n_sec = sections_of(&h, NULL, NULL, sec, &sz_ok);
    uint64_t payload = 0;
    for (int i = 0; i < n_sec; i++) payload += sec[i].n;
    if (!sz_ok || payload != h.payload) {
        fail(err, "state file %s: inconsistent header (payload %llu bytes, the sizes add up to %llu)", path,
             (unsigned long long)h.payload, (unsigned long long)payload);
        goto done;
    }
    if ((uint64_t)fsize != HEADER_BYTES + payload + 8) {
        fail(err, "state file %s: %s: %ld bytes, expected %llu", path,
             (uint64_t)fsize < HEADER_BYTES + payload + 8 ? "truncated" : "trailing bytes", fsize,
             (unsigned long long)(HEADER_BYTES + payload + 8));
        goto done;
    }
    /* allocate the state's buffers at the header's sizes (bounded by the file size) */
    st = nx_calloc(1, sizeof *st, "state", &ie);
    nx_spec_seq_state *s = st ? &st->s : NULL;
    bool aok = st != NULL;
    const size_t nl = h.n_gdn ? h.n_gdn : 1;
    aok = aok && (s->tgt.conv = nx_alloc_aligned(nl * (h.conv_n ? h.conv_n : 1) * 4, "state", &ie)) &&
          (s->tgt.ssm = nx_alloc_aligned(nl * (h.ssm_n ? h.ssm_n : 1) * 4, "state", &ie));
    const int ks = (h.flags & FL_TOKENS) ? 3 : 2;
    const uint64_t kb = sec[ks].n, vb = sec[ks + 1].n;
    aok = aok && (s->tgt.k = nx_malloc(kb ? kb : 1, "state", &ie)) && (s->tgt.v = nx_malloc(vb ? vb : 1, "state", &ie));
    if (aok && (h.flags & FL_MTP)) {
        const uint64_t mkb = sec[ks + 2].n, mvb = sec[ks + 3].n;
        aok = (s->mtp.k = nx_malloc(mkb ? mkb : 1, "state", &ie)) && (s->mtp.v = nx_malloc(mvb ? mvb : 1, "state", &ie));
        s->mtp.kv_cap_k = mkb;
        s->mtp.kv_cap_v = mvb;
    }
    if (aok && (h.flags & FL_SPEC)) {
        aok = (s->pending_h = nx_alloc_aligned((size_t)(h.E ? h.E : 1) * 4, "state", &ie)) &&
              (s->mir_tok = nx_malloc((size_t)(h.n_mir ? h.n_mir : 1) * 4, "state", &ie)) &&
              (s->mir_h = nx_alloc_aligned((size_t)(h.n_mir ? h.n_mir : 1) * (size_t)(h.E ? h.E : 1) * 4, "state", &ie));
    }
    if (aok && (h.flags & FL_TOKENS)) aok = (st->tokens = nx_malloc((size_t)(h.n_tokens ? h.n_tokens : 1) * 4, "state", &ie));
    if (!aok) {
        nx_api_pass(err, &ie);
        goto done;
    }
    n_sec = sections_of(&h, s, st->tokens, sec, &sz_ok);
    hasher x;
    hash_init(&x);
    hash_bytes(&x, hb, sizeof hb);
    for (int i = 0; i < n_sec; i++) {
        if (sec[i].n && fread(sec[i].p, 1, (size_t)sec[i].n, f) != sec[i].n) {
            fail(err, "state file %s: read error: %s", path, ferror(f) ? strerror(errno) : "unexpected end of file");
            goto done;
        }
        hash_bytes(&x, sec[i].p, (size_t)sec[i].n);
    }
    uint8_t cb[8];
    if (fread(cb, 1, 8, f) != 8) {
        fail(err, "state file %s: truncated: no checksum", path);
        goto done;
    }
    if (get64(cb) != hash_final(&x)) {
        fail(err, "state file %s: checksum mismatch: the file is corrupted", path);
        goto done;
    }
    const uint32_t n_vocab = nx_api_model(model)->hp.n_vocab;
    for (int32_t i = 0; i < h.n_tokens; i++)
        if (st->tokens[i] < 0 || (uint32_t)st->tokens[i] >= n_vocab) {
            fail(err, "state file %s: token %d at position %d is outside the vocabulary (%u)", path, st->tokens[i], i,
                 n_vocab);
            goto done;
        }
    for (int32_t i = 0; i < h.n_mir; i++)
        if (s->mir_tok[i] < 0 || (uint32_t)s->mir_tok[i] >= n_vocab) {
            fail(err, "state file %s: backlog token %d is outside the vocabulary (%u)", path, s->mir_tok[i], n_vocab);
            goto done;
        }
    /* fill in the descriptors */
    st->kind = NEXTN_STATE_FULL;
    st->from_spec = (h.flags & FL_SPEC) != 0;
    st->fingerprint = h.fp;
    st->mtp_fingerprint = h.mtp_fp;
    st->n_ctx = h.n_ctx;
    st->n_tokens = h.n_tokens;
    s->tgt.seq = -1;
    s->tgt.pos = h.pos;
    s->tgt.n_layer = (int)h.n_gdn;
    s->tgt.conv_n = (size_t)h.conv_n;
    s->tgt.ssm_n = (size_t)h.ssm_n;
    s->tgt.has_kv = true;
    s->tgt.kv_layers = (int)h.kv_layers;
    s->tgt.kv_dim = (int)h.kv_dim;
    s->tgt.kv_type_k = kv_field_k(h.kv_type);
    s->tgt.kv_type_v = kv_field_v(h.kv_type);
    s->tgt.kv_cap_k = kb;
    s->tgt.kv_cap_v = vb;
    s->has_mtp = (h.flags & FL_MTP) != 0;
    if (s->has_mtp) {
        s->mtp.seq = -1;
        s->mtp.pos = h.mtp_pos;
        s->mtp.has_kv = true;
        s->mtp.kv_layers = (int)h.mtp_layers;
        s->mtp.kv_dim = (int)h.mtp_dim;
        s->mtp.kv_type_k = s->tgt.kv_type_k;
        s->mtp.kv_type_v = s->tgt.kv_type_v;
        /* the MTP context has no recurrent layers: an empty recurrent part */
        s->mtp.conv = nx_alloc_aligned(4, "state", &ie);
        s->mtp.ssm = s->mtp.conv ? nx_alloc_aligned(4, "state", &ie) : NULL;
        if (!s->mtp.ssm) {
            nx_api_pass(err, &ie);
            goto done;
        }
    }
    s->base = h.base;
    s->stale = h.stale != 0;
    s->n_mir = s->cap_mir = h.n_mir;
    s->E = h.E;
    ok = true;
done:
    fclose(f);
    if (!ok) {
        nextn_state_free(st);
        return false;
    }
    *out = st;
    return true;
}
