/* stop.h - stop strings: one Aho-Corasick automaton over the bytes of all of a generation's
 * stop strings, advanced by the new bytes only.
 *
 * Cost: building is O(total stop bytes); feeding n bytes is O(n) amortised (each byte moves the
 * state one level deeper at most, each failure link one level up), whatever the number and
 * length of the stop strings - nothing is ever rescanned.
 *
 * Semantics (independent of how the text is split into pieces):
 *  - a match is reported at the first byte where some stop string ends; when several end at that
 *    byte, the longest (earliest starting) wins, then the lowest index;
 *  - nx_stop_held() is the length of the longest suffix of the text fed so far that is a proper
 *    prefix of some stop string (the bytes a streaming caller must hold back, since they may
 *    still become a stop string); it is the automaton state's depth.
 * Stop strings are byte strings (UTF-8 in practice: a valid UTF-8 stop string can only match a
 * valid UTF-8 text at character boundaries, so nothing is decoded here).
 *
 * Limits (checked by nx_stop_build, the message names `stop`): at most NX_STOP_MAX_STRINGS
 * non-empty strings of NX_STOP_MAX_BYTES bytes together; the automaton then takes at most
 * about 25 bytes per stop byte (13 MB at the limit).
 *
 * Ownership: the caller owns the nx_stop (nx_stop_free); it copies nothing it does not need
 * (the strings themselves are not kept, only their lengths). Not thread-safe; one cursor each. */
#ifndef NX_STOP_H
#define NX_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/common.h"

#define NX_STOP_MAX_STRINGS 17          /* 16 a client may send + one the server adds (</tool_call>) */
#define NX_STOP_MAX_BYTES (512u * 1024u) /* all stop strings together */

typedef struct nx_stop nx_stop;

typedef struct {
    int index;  /* the stop string that matched (its position in the build list), -1 none */
    size_t end; /* bytes of this feed's input consumed up to and including the match's last byte */
    size_t len; /* the stop string's length (the match starts len bytes before `end` in the text) */
} nx_stop_match;

/* Builds the automaton for strs[0..n) (lens[i] bytes each; lens NULL: NUL-terminated).  Empty
 * strings and n == 0 are allowed (an empty string never matches; n == 0 never matches).  False
 * past the limits (naming `stop`) or on out-of-memory. */
bool nx_stop_build(nx_stop **out, const char *const *strs, const size_t *lens, int n, nx_err *err);
void nx_stop_free(nx_stop *s);
/* Back to the start of a text (nothing fed). */
void nx_stop_reset(nx_stop *s);
/* Feeds bytes p[0..n): returns true at the first stop string completed (m filled; the bytes
 * after m->end are not fed), false when none (m->index = -1, all n bytes fed).  After a match
 * the state is the matched one; feeding further continues the text as if nothing happened. */
bool nx_stop_feed(nx_stop *s, const char *p, size_t n, nx_stop_match *m);
/* Trailing bytes of the text fed so far that may still become part of a stop string. */
size_t nx_stop_held(const nx_stop *s);
/* The number of strings given at build (with empty ones). */
int nx_stop_count(const nx_stop *s);

#endif
