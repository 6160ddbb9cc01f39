/* utf8.c - UTF-8 validation and encoding helpers (RFC 3629 rules). */
#include "base/utf8.h"

/* Length of the character starting at s[0] if it is a complete valid sequence within len
 * bytes, 0 if invalid, -1 if it is a valid but truncated prefix (more bytes are needed). */
int nx_utf8_char_len(const unsigned char *s, size_t len) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c == 0xE0) { need = 3; lo = 0xA0; }
    else if (c == 0xED) { need = 3; hi = 0x9F; }           /* no surrogates */
    else if (c >= 0xE1 && c <= 0xEF) need = 3;
    else if (c == 0xF0) { need = 4; lo = 0x90; }           /* no overlong 4-byte forms */
    else if (c >= 0xF1 && c <= 0xF3) need = 4;
    else if (c == 0xF4) { need = 4; hi = 0x8F; }           /* <= U+10FFFF */
    else return 0;                                          /* 80..C1, F5..FF */
    for (int i = 1; i < need; i++) {
        if ((size_t)i >= len) return -1;
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
    }
    return need;
}

size_t nx_utf8_valid_prefix(const char *str, size_t len) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        /* fast path over ASCII */
        if (s[i] < 0x80) { i++; continue; }
        int n = nx_utf8_char_len(s + i, len - i);
        if (n <= 0) return i;
        i += (size_t)n;
    }
    return len;
}

int nx_utf8_encode(uint32_t cp, char out[4]) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

uint32_t nx_utf8_decode(const unsigned char *s, int n) {
    switch (n) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
               ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}
