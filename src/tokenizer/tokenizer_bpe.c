/* tokenizer_bpe.c - byte-level BPE merging of one piece.
 *
 * Algorithm (same result as HF tokenizers' Word::merge_all and llama.cpp): start with one
 * symbol per byte; keep a min-heap of adjacent pairs keyed by (merge rank, position of the
 * left symbol); pop the best pair, skip it if it is stale (one of its symbols was merged
 * away since it was pushed: the current pair no longer has that rank), otherwise merge the
 * two symbols in the doubly linked list and push the two new neighbour pairs.  Cost is
 * O(n log n) per piece, so a megabyte of whitespace is fine.
 *
 * Results of short pieces are memoised in a word cache (real text repeats words a lot).
 */
#include "tokenizer/tokenizer_bpe.h"

#include <stdlib.h>
#include <string.h>

typedef struct nx_bpe_heap_item {
    uint32_t rank;
    uint32_t pos; /* index of the left symbol = its byte offset in the piece */
} nx_bpe_heap_item;

typedef struct nx_bpe_cache_entry {
    uint32_t hash;     /* 0 = empty slot */
    uint32_t key_off;  /* into key_arena (< CACHE_ARENA_MAX) */
    uint32_t ids_off;  /* into id_arena */
    uint16_t key_len;  /* <= CACHE_MAX_PIECE */
    uint16_t n_ids;    /* <= key_len */
} nx_bpe_cache_entry;  /* 16 bytes: the whole table (1 MiB) stays in L2 */

enum {
    CACHE_MAX_PIECE = 128,         /* longer pieces are not cached */
    CACHE_SLOTS_LOG2 = 16,         /* 65536 slots (1.5 MiB); cleared when half full */
    CACHE_ARENA_MAX = 8 << 20,     /* bytes of keys / ids kept before clearing */
};

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

/* ---- merge table ---------------------------------------------------------------------- */

bool nx_bpe_merges_init(nx_bpe_merges *m, uint32_t n_merges, nx_err *err) {
    memset(m, 0, sizeof *m);
    uint64_t cap = 16;
    /* load factor in (0.29, 0.58]: short linear probes, table small enough to stay warm */
    while (cap * 7 < (uint64_t)n_merges * 12) cap <<= 1;
    m->slots = nx_malloc(cap * sizeof *m->slots, "BPE merge table", err);
    if (!m->slots) return false;
    for (uint64_t i = 0; i < cap; i++) m->slots[i].key = NX_BPE_EMPTY;
    m->mask = cap - 1;
    return true;
}

void nx_bpe_merges_free(nx_bpe_merges *m) {
    free(m->slots);
    memset(m, 0, sizeof *m);
}

void nx_bpe_merges_add(nx_bpe_merges *m, int32_t left, int32_t right, uint32_t rank, int32_t result) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        nx_bpe_merge_slot *s = &m->slots[i];
        if (s->key == key) return; /* keep the lower rank */
        if (s->key == NX_BPE_EMPTY) {
            *s = (nx_bpe_merge_slot){key, rank, result};
            m->n++;
            return;
        }
    }
}

uint32_t nx_bpe_merges_find(const nx_bpe_merges *m, int32_t left, int32_t right, int32_t *result) {
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (uint64_t i = mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        const nx_bpe_merge_slot *s = &m->slots[i];
        if (s->key == key) {
            *result = s->result;
            return s->rank;
        }
        if (s->key == NX_BPE_EMPTY) return UINT32_MAX;
    }
}

/* ---- state / cache ------------------------------------------------------------------------ */

bool nx_bpe_state_init(nx_bpe_state *s, nx_err *err) {
    memset(s, 0, sizeof *s);
    s->slots = nx_calloc((size_t)1 << CACHE_SLOTS_LOG2, sizeof *s->slots, "BPE word cache", err);
    if (!s->slots) return false;
    s->slot_mask = ((uint64_t)1 << CACHE_SLOTS_LOG2) - 1;
    return true;
}

void nx_bpe_state_free(nx_bpe_state *s) {
    free(s->ids);
    free(s->prev);
    free(s->next);
    free(s->heap);
    free(s->slots);
    free(s->key_arena);
    free(s->id_arena);
    memset(s, 0, sizeof *s);
}

/* 8 bytes at a time (the tail zero-padded), then a final mix; never 0 (= empty slot). */
static uint32_t hash_bytes(const char *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    if (i < n) {
        uint64_t w = 0; /* byte loop: a variable-length memcpy costs more for 1..7 bytes */
        for (unsigned k = 0; i < n; i++, k += 8) w |= (uint64_t)(unsigned char)p[i] << k;
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
    }
    uint32_t r = (uint32_t)(mix64(h) >> 32);
    return r ? r : 1;
}

static nx_bpe_cache_entry *cache_find(nx_bpe_state *s, uint32_t h, const char *p, size_t n) {
    for (uint64_t i = h & s->slot_mask;; i = (i + 1) & s->slot_mask) {
        nx_bpe_cache_entry *e = &s->slots[i];
        if (e->hash == 0) return e;
        if (e->hash == h && e->key_len == n && !memcmp(s->key_arena + e->key_off, p, n)) return e;
    }
}

static void cache_clear(nx_bpe_state *s) {
    memset(s->slots, 0, (s->slot_mask + 1) * sizeof *s->slots);
    s->n_entries = 0;
    s->key_len = 0;
    s->id_len = 0;
}

/* Stores a result; failure to grow the cache is not an error (the cache is optional). */
static void cache_put(nx_bpe_state *s, uint32_t h, const char *p, size_t n, const int32_t *ids, size_t n_ids) {
    if (s->n_entries >= (s->slot_mask + 1) / 2 || s->key_len + n > CACHE_ARENA_MAX ||
        (s->id_len + n_ids) * sizeof(int32_t) > CACHE_ARENA_MAX)
        cache_clear(s);
    if (s->key_len + n > s->key_cap) {
        size_t cap = s->key_cap ? s->key_cap * 2 : 65536;
        char *k = realloc(s->key_arena, cap);
        if (!k) return;
        s->key_arena = k;
        s->key_cap = cap;
    }
    if (s->id_len + n_ids > s->id_cap) {
        size_t cap = s->id_cap ? s->id_cap * 2 : 16384;
        int32_t *v = realloc(s->id_arena, cap * sizeof *v);
        if (!v) return;
        s->id_arena = v;
        s->id_cap = cap;
    }
    nx_bpe_cache_entry *e = cache_find(s, h, p, n);
    if (e->hash != 0) return; /* already present */
    memcpy(s->key_arena + s->key_len, p, n);
    memcpy(s->id_arena + s->id_len, ids, n_ids * sizeof *ids);
    *e = (nx_bpe_cache_entry){h, (uint32_t)s->key_len, (uint32_t)s->id_len, (uint16_t)n, (uint16_t)n_ids};
    s->key_len += n;
    s->id_len += n_ids;
    s->n_entries++;
}

/* ---- heap --------------------------------------------------------------------------------- */

static bool heap_less(nx_bpe_heap_item a, nx_bpe_heap_item b) {
    return a.rank < b.rank || (a.rank == b.rank && a.pos < b.pos);
}

static void heap_push(nx_bpe_heap_item *h, size_t *n, nx_bpe_heap_item it) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(it, h[parent])) break;
        h[i] = h[parent];
        i = parent;
    }
    h[i] = it;
}

static nx_bpe_heap_item heap_pop(nx_bpe_heap_item *h, size_t *n) {
    nx_bpe_heap_item top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && heap_less(h[c + 1], h[c])) c++;
        if (!heap_less(h[c], last)) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
    return top;
}

/* ---- encoding ----------------------------------------------------------------------------- */

static bool grow_scratch(nx_bpe_state *s, size_t n, nx_err *err) {
    if (n <= s->cap) return true;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *ids = realloc(s->ids, cap * sizeof *ids);
    if (ids) s->ids = ids;
    int32_t *prev = realloc(s->prev, cap * sizeof *prev);
    if (prev) s->prev = prev;
    int32_t *next = realloc(s->next, cap * sizeof *next);
    if (next) s->next = next;
    /* at most n-1 initial pairs plus 2 pushes per merge (n-1 merges): < 3n items */
    nx_bpe_heap_item *heap = realloc(s->heap, 3 * cap * sizeof *heap);
    if (heap) s->heap = heap;
    if (!ids || !prev || !next || !heap)
        return nx_fail(err, "out of memory for BPE scratch of a %zu-byte piece", n);
    s->cap = cap;
    return true;
}

static bool append_ids(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t k, nx_err *err) {
    if (*n + k > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *n + k) c *= 2;
        int32_t *v = realloc(*ids, c * sizeof *v);
        if (!v) return nx_fail(err, "out of memory for %zu token ids", c);
        *ids = v;
        *cap = c;
    }
    memcpy(*ids + *n, src, k * sizeof *src);
    *n += k;
    return true;
}

static void push_pair(nx_bpe_state *s, const nx_bpe_merges *m, size_t *hn, int32_t left) {
    int32_t right = s->next[left], res = -1;
    if (right < 0) return;
    uint32_t rank = nx_bpe_merges_find(m, s->ids[left], s->ids[right], &res);
    if (rank != UINT32_MAX) heap_push(s->heap, hn, (nx_bpe_heap_item){rank, (uint32_t)left});
}

/* Short pieces: the same merge order without a heap.  ids[0..k) are the current symbols and
 * small_rank[i] the rank of the pair (ids[i], ids[i+1]); each step merges the leftmost pair
 * of lowest rank (strict < keeps the leftmost on ties) and recomputes only the two pairs that
 * touch the merged symbol.  O(n^2) compares, which beats heap bookkeeping for n <= 128. */
static size_t merge_small(nx_bpe_state *s, const nx_bpe_merges *m, const int32_t byte_token[256],
                          const char *piece, size_t len) {
    int32_t *ids = s->ids, res;
    uint32_t *rank = s->small_rank;
    size_t k = len;
    for (size_t i = 0; i < len; i++) ids[i] = byte_token[(unsigned char)piece[i]];
    for (size_t i = 0; i + 1 < k; i++) rank[i] = nx_bpe_merges_find(m, ids[i], ids[i + 1], &res);
    while (k > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < k; i++)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == UINT32_MAX) break;
        nx_bpe_merges_find(m, ids[best], ids[best + 1], &ids[best]);
        memmove(ids + best + 1, ids + best + 2, (k - best - 2) * sizeof *ids);
        if (best + 2 < k) memmove(rank + best + 1, rank + best + 2, (k - best - 3) * sizeof *rank);
        k--;
        if (best > 0) rank[best - 1] = nx_bpe_merges_find(m, ids[best - 1], ids[best], &res);
        if (best + 1 < k) rank[best] = nx_bpe_merges_find(m, ids[best], ids[best + 1], &res);
    }
    return k;
}

bool nx_bpe_encode_piece(nx_bpe_state *s, const nx_bpe_merges *m, const int32_t byte_token[256],
                         const char *piece, size_t len, int32_t **ids, size_t *n, size_t *cap,
                         nx_err *err) {
    if (len == 0) return true;
    if (len > INT32_MAX) return nx_fail(err, "text piece of %zu bytes exceeds the 2 GiB limit", len);
    if (len == 1) {
        int32_t id = byte_token[(unsigned char)piece[0]];
        return append_ids(ids, n, cap, &id, 1, err);
    }
    uint32_t h = 0;
    if (len <= CACHE_MAX_PIECE) {
        h = hash_bytes(piece, len);
        nx_bpe_cache_entry *e = cache_find(s, h, piece, len);
        if (e->hash != 0) return append_ids(ids, n, cap, s->id_arena + e->ids_off, e->n_ids, err);
    }
    if (!grow_scratch(s, len, err)) return false;
    if (len <= NX_ARRAY_LEN(s->small_rank)) {
        size_t k = merge_small(s, m, byte_token, piece, len);
        if (len <= CACHE_MAX_PIECE) cache_put(s, h, piece, len, s->ids, k);
        return append_ids(ids, n, cap, s->ids, k, err);
    }
    for (size_t i = 0; i < len; i++) {
        s->ids[i] = byte_token[(unsigned char)piece[i]];
        s->prev[i] = (int32_t)i - 1;
        s->next[i] = i + 1 < len ? (int32_t)i + 1 : -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i + 1 < len; i++) push_pair(s, m, &hn, (int32_t)i);
    while (hn > 0) {
        nx_bpe_heap_item it = heap_pop(s->heap, &hn);
        int32_t left = (int32_t)it.pos, right = s->next[left], res = -1;
        /* removed symbols get ids[] = -1; a stale item has a different (or no) rank now */
        if (s->ids[left] < 0 || right < 0) continue;
        if (nx_bpe_merges_find(m, s->ids[left], s->ids[right], &res) != it.rank) continue;
        s->ids[left] = res;
        s->ids[right] = -1;
        s->next[left] = s->next[right];
        if (s->next[right] >= 0) s->prev[s->next[right]] = left;
        if (s->prev[left] >= 0) push_pair(s, m, &hn, s->prev[left]);
        push_pair(s, m, &hn, left);
    }
    /* compact the surviving symbols in place (they are in order along the list) */
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = s->next[i]) s->ids[k++] = s->ids[i];
    if (len <= CACHE_MAX_PIECE) cache_put(s, h, piece, len, s->ids, k);
    return append_ids(ids, n, cap, s->ids, k, err);
}
