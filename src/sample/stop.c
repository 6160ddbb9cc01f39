/* stop.c - the stop-string automaton (see stop.h).
 *
 * Layout: a trie of all stop strings, node 0 the root.  Each non-root node knows its byte, its
 * parent's next child (`sib`) and its own first child (`kid`): a child lookup walks at most the
 * node's fan-out (<= 256), and the root has a dense 256-entry table instead.  Breadth-first, each
 * node gets its failure link (the longest proper suffix of its string that is a trie node) and
 * `best`: the deepest node on its failure chain, itself included, where a stop string ends (0
 * none) - so a match is found in O(1) at every byte, the longest one first. */
#include "sample/stop.h"

#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

struct nx_stop {
    uint32_t n_nodes;
    uint32_t *fail, *depth, *kid, *sib, *best;
    int32_t *out;      /* the stop string ending exactly at the node (lowest index), -1 none */
    uint8_t *byte;
    uint32_t root[256]; /* the root's children, 0 = none (then the root itself) */
    uint32_t state;
    int n_strings;
};

static uint32_t child(const nx_stop *s, uint32_t v, uint8_t c) {
    if (v == 0) return s->root[c] ? s->root[c] : NONE;
    for (uint32_t u = s->kid[v]; u != NONE; u = s->sib[u])
        if (s->byte[u] == c) return u;
    return NONE;
}

/* The state after byte c from state v (the goto function with failure links). */
static uint32_t step(const nx_stop *s, uint32_t v, uint8_t c) {
    for (;;) {
        const uint32_t u = child(s, v, c);
        if (u != NONE) return u;
        if (v == 0) return 0;
        v = s->fail[v];
    }
}

void nx_stop_free(nx_stop *s) {
    if (!s) return;
    free(s->fail);
    free(s->depth);
    free(s->kid);
    free(s->sib);
    free(s->best);
    free(s->out);
    free(s->byte);
    free(s);
}

bool nx_stop_build(nx_stop **out, const char *const *strs, const size_t *lens, int n, nx_err *err) {
    *out = NULL;
    if (n < 0 || n > NX_STOP_MAX_STRINGS)
        return nx_fail(err, "'stop' has %d strings; at most %d are allowed", n, NX_STOP_MAX_STRINGS);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        total += lens ? lens[i] : strlen(strs[i]);
        if (total > NX_STOP_MAX_BYTES)
            return nx_fail(err, "'stop' strings are longer than %u bytes together (the limit)",
                           (unsigned)NX_STOP_MAX_BYTES);
    }
    nx_stop *s = calloc(1, sizeof *s);
    if (!s) return nx_fail(err, "out of memory building the stop strings");
    const size_t cap = total + 1;
    s->fail = malloc(cap * sizeof *s->fail);
    s->depth = malloc(cap * sizeof *s->depth);
    s->kid = malloc(cap * sizeof *s->kid);
    s->sib = malloc(cap * sizeof *s->sib);
    s->best = malloc(cap * sizeof *s->best);
    s->out = malloc(cap * sizeof *s->out);
    s->byte = malloc(cap);
    if (!s->fail || !s->depth || !s->kid || !s->sib || !s->best || !s->out || !s->byte) {
        nx_stop_free(s);
        return nx_fail(err, "out of memory building the stop strings");
    }
    s->n_strings = n;
    s->n_nodes = 1;
    s->fail[0] = 0;
    s->depth[0] = 0;
    s->kid[0] = NONE;
    s->sib[0] = NONE;
    s->out[0] = -1;
    s->best[0] = 0;
    s->byte[0] = 0;
    /* the trie */
    for (int i = 0; i < n; i++) {
        const size_t len = lens ? lens[i] : strlen(strs[i]);
        const uint8_t *p = (const uint8_t *)strs[i];
        uint32_t v = 0;
        for (size_t k = 0; k < len; k++) {
            uint32_t u = child(s, v, p[k]);
            if (u == NONE) {
                u = s->n_nodes++;
                s->depth[u] = s->depth[v] + 1;
                s->kid[u] = NONE;
                s->out[u] = -1;
                s->byte[u] = p[k];
                if (v == 0) {
                    s->root[p[k]] = u;
                    s->sib[u] = NONE;
                } else {
                    s->sib[u] = s->kid[v];
                    s->kid[v] = u;
                }
            }
            v = u;
        }
        if (v != 0 && s->out[v] < 0) s->out[v] = i;
    }
    /* failure links and best matches, breadth-first (a failure link points to a shallower node,
     * whose own links are final by then) */
    uint32_t *queue = malloc((size_t)s->n_nodes * sizeof *queue);
    if (!queue) {
        nx_stop_free(s);
        return nx_fail(err, "out of memory building the stop strings");
    }
    uint32_t qh = 0, qt = 0;
    for (int c = 0; c < 256; c++)
        if (s->root[c]) {
            const uint32_t u = s->root[c];
            s->fail[u] = 0;
            queue[qt++] = u;
        }
    while (qh < qt) {
        const uint32_t v = queue[qh++];
        s->best[v] = s->out[v] >= 0 ? v : s->best[s->fail[v]];
        for (uint32_t u = s->kid[v]; u != NONE; u = s->sib[u]) {
            s->fail[u] = step(s, s->fail[v], s->byte[u]);
            queue[qt++] = u;
        }
    }
    free(queue);
    *out = s;
    return true;
}

void nx_stop_reset(nx_stop *s) { s->state = 0; }

bool nx_stop_feed(nx_stop *s, const char *p, size_t n, nx_stop_match *m) {
    m->index = -1;
    m->end = n;
    m->len = 0;
    if (s->n_nodes == 1) return false;
    uint32_t v = s->state;
    for (size_t k = 0; k < n; k++) {
        v = step(s, v, (uint8_t)p[k]);
        const uint32_t b = s->best[v];
        if (b) {
            s->state = v;
            m->index = s->out[b];
            m->end = k + 1;
            m->len = s->depth[b];
            return true;
        }
    }
    s->state = v;
    return false;
}

size_t nx_stop_held(const nx_stop *s) { return s->depth[s->state]; }

int nx_stop_count(const nx_stop *s) { return s->n_strings; }
