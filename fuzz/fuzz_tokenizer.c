/* fuzz_tokenizer.c - libFuzzer target for the tokenizer on a small byte-level vocabulary
 * (256 byte symbols, a few merges and added tokens), both pre-tokenizers:
 *   - any input: encoding either fails (exactly when the input is not valid UTF-8) or gives ids
 *     that decode back to the input byte for byte (NFC step off), or (NFC step on, the Qwen
 *     default) to a text that encodes to the same ids again (normalising is idempotent);
 *   - the input read as token ids (2 bytes each, some out of range): the streaming
 *     detokenizer emits only valid UTF-8 and rejects bad ids with an error.
 * Violations abort(); ASan/UBSan check memory. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer.h"
#include "base/utf8.h"

enum { N_BYTES = 256 };
static const char *const EXTRA[] = {"he", "ll", "hell", "hello", "\xC4\xA0w", "\xC4\xA0\xC4\xA0", "aa", "<|im_end|>",
                                    "<think>", "<|im", "</s>", "[PAD]", "\xC3\x83\xC2\xA9"};
static const int32_t EXTRA_TYPES[] = {1, 1, 1, 1, 1, 1, 1, NX_TOKEN_CONTROL, NX_TOKEN_USER_DEFINED, NX_TOKEN_CONTROL, 1,
                                      NX_TOKEN_UNUSED, 1};
static const char *const MERGES[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "\xC4\xA0 \xC4\xA0", "a a", "\xC3\x83 \xC2\xA9"}; /* bytes C3 A9 = "é" */

/* Built once per process (the harness, not the library, keeps this state). */
static nx_tokenizer *toks[4]; /* [nfc * 2 + pre] */

static void build(void) {
    static char text[N_BYTES][4];
    nx_str tokens[N_BYTES + 13];
    int32_t types[N_BYTES + 13];
    nx_str merges[8];
    uint32_t extra = 256;
    for (unsigned b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        int n = nx_utf8_encode(printable ? b : extra++, text[b]);
        tokens[b] = (nx_str){text[b], (uint64_t)n};
        types[b] = NX_TOKEN_NORMAL;
    }
    for (int i = 0; i < 13; i++) {
        tokens[N_BYTES + i] = (nx_str){EXTRA[i], strlen(EXTRA[i])};
        types[N_BYTES + i] = EXTRA_TYPES[i];
    }
    for (int i = 0; i < 8; i++) merges[i] = (nx_str){MERGES[i], strlen(MERGES[i])};
    const char *pre[2] = {"qwen2", "qwen35"};
    for (int k = 0; k < 4; k++) {
        nx_vocab_desc d;
        nx_vocab_desc_init(&d);
        d.n_tokens = N_BYTES + 13;
        d.tokens = tokens;
        d.types = types;
        d.n_merges = 8;
        d.merges = merges;
        d.pre = pre[k & 1];
        d.normalizer = k >> 1 ? NX_NORM_NFC : NX_NORM_NONE;
        d.eos_id = N_BYTES + 7;
        nx_err err;
        if (!nx_tokenizer_create(&toks[k], &d, &err)) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!toks[0]) build();
    if (size == 0) return 0;
    bool parse_special = data[0] & 1;
    const bool nfc = data[0] & 8;
    nx_tokenizer *t = toks[(nfc ? 2 : 0) + ((data[0] >> 1) & 1)];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    bool valid = nx_utf8_valid_prefix(text, len) == len;
    nx_tokens ids = {0};
    nx_buf out = {0};
    nx_err err;
    bool ok = nx_tokenize(t, text, len, false, parse_special, &ids, &err);
    if (ok != valid) abort();
    if (ok) {
        /* decoding with special=true restores CONTROL text that was matched */
        if (!nx_detokenize(t, ids.ids, ids.n, true, &out, &err)) abort();
        if (!nfc && (out.len != len || memcmp(out.data, text, len))) abort();
        if (nfc) {
            nx_tokens again = {0};
            if (nx_utf8_valid_prefix(out.data, out.len) != out.len) abort();
            if (!nx_tokenize(t, out.data, out.len, false, parse_special, &again, &err)) abort();
            if (again.n != ids.n || memcmp(again.ids, ids.ids, ids.n * sizeof *ids.ids)) abort();
            nx_tokens_free(&again);
        }
    }
    /* the bytes as 16-bit token ids through the streaming detokenizer */
    nx_detok_stream s;
    nx_detok_stream_init(&s, t, data[0] & 4);
    out.len = 0;
    for (size_t i = 0; i + 1 < size; i += 2) {
        int32_t id = (int32_t)(data[i] | data[i + 1] << 8) % 300; /* 269..299 are out of range */
        bool pushed = nx_detok_stream_push(&s, id, &out, &err);
        if (pushed != (id < N_BYTES + 13)) abort();
    }
    if (!nx_detok_stream_flush(&s, &out, &err)) abort();
    if (out.len && nx_utf8_valid_prefix(out.data, out.len) != out.len) abort();
    nx_tokens_free(&ids);
    nx_buf_free(&out);
    return 0;
}
