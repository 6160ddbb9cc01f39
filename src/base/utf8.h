/* utf8.h - UTF-8 validation and encoding helpers shared by the tokenizer and chat code. */
#ifndef NX_UTF8_H
#define NX_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the valid character at s[0], 0 if s[0..] is not valid UTF-8, -1 if it
 * is a valid prefix cut off by len.  len must be >= 1. */
int nx_utf8_char_len(const unsigned char *s, size_t len);
/* Length of the valid UTF-8 prefix of s (== len when all valid).  Rejects overlong forms,
 * surrogates and code points above U+10FFFF. */
size_t nx_utf8_valid_prefix(const char *s, size_t len);
/* Encodes a code point (<= U+10FFFF); returns the byte count. */
int nx_utf8_encode(uint32_t cp, char out[4]);
/* Decodes a valid sequence of n bytes (n from nx_utf8_char_len). */
uint32_t nx_utf8_decode(const unsigned char *s, int n);

#endif
