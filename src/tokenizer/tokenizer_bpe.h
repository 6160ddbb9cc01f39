/* tokenizer_bpe.h - byte-level BPE merging of one pre-tokenized piece, with a word cache.
 * Internal to the tokenizer. */
#ifndef NX_TOKENIZER_BPE_H
#define NX_TOKENIZER_BPE_H

#include "base/common.h"

/* Merge table: (left id, right id) -> (rank, merged id).  Open addressing on a 64-bit key. */
typedef struct nx_bpe_merge_slot {
    uint64_t key;        /* (left << 32 | right); NX_BPE_EMPTY = free slot */
    uint32_t rank;
    int32_t result;
} nx_bpe_merge_slot;     /* 16 bytes: one probe touches one cache line */

typedef struct nx_bpe_merges {
    nx_bpe_merge_slot *slots;
    uint64_t mask;
    uint32_t n;
} nx_bpe_merges;

#define NX_BPE_EMPTY UINT64_MAX

bool nx_bpe_merges_init(nx_bpe_merges *m, uint32_t n_merges, nx_err *err);
void nx_bpe_merges_free(nx_bpe_merges *m);
/* Adds a merge unless the pair is already present (the first, lowest rank, wins: HF does the
 * same when a merges list repeats a pair). */
void nx_bpe_merges_add(nx_bpe_merges *m, int32_t left, int32_t right, uint32_t rank, int32_t result);
/* Returns the rank or UINT32_MAX when the pair has no merge; *result receives the merged id. */
uint32_t nx_bpe_merges_find(const nx_bpe_merges *m, int32_t left, int32_t right, int32_t *result);

/* Per-tokenizer scratch and cache used to encode words.  Not thread-safe. */
typedef struct nx_bpe_state {
    /* scratch for one piece, grown as needed */
    int32_t *ids;
    int32_t *prev, *next;
    uint32_t small_rank[128]; /* pair ranks for the short-piece path */
    struct nx_bpe_heap_item *heap;
    size_t cap, heap_cap;
    /* word cache: piece bytes -> token ids.  Cleared wholesale when full. */
    struct nx_bpe_cache_entry *slots;
    uint64_t slot_mask;
    uint32_t n_entries;
    char *key_arena;
    size_t key_len, key_cap;
    int32_t *id_arena;
    size_t id_len, id_cap;
} nx_bpe_state;

bool nx_bpe_state_init(nx_bpe_state *s, nx_err *err);
void nx_bpe_state_free(nx_bpe_state *s);

/* Appends the ids of piece[0..len) to (*ids, *n, *cap).  byte_token maps each byte to the id
 * of its one-character byte-level token. */
bool nx_bpe_encode_piece(nx_bpe_state *s, const nx_bpe_merges *m, const int32_t byte_token[256],
                         const char *piece, size_t len, int32_t **ids, size_t *n, size_t *cap,
                         nx_err *err);

#endif
