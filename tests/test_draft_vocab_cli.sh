#!/usr/bin/env bash
# test_draft_vocab_cli.sh - `nextn draft-vocab` (token frequency file) and `--draft-vocab K` in
# `nextn run --spec mtp`, `nextn spec-bench` and `nextn bench --spec mtp`: greedy output identical
# to plain decoding, the file's format, and clear errors for K > vocabulary, a file made for
# another model (vocabulary size or tokenizer fingerprint), a malformed file, a file without K.
. "$(dirname "$0")/lib.sh"
check_show="$tmp/out"

"$NEXTN" mkmodel --preset tiny --seed 3 -o "$tmp/full.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
"$NEXTN" mkmodel --preset tiny --seed 3 --vocab 600 -o "$tmp/v600.gguf" >/dev/null 2>&1 || exit 1
text="$NEXTN_SRC/docs/mtp.md"

check "draft-vocab counts a text" \
  '"$NEXTN" draft-vocab -m "$tmp/full.gguf" -f "$text" -o "$tmp/freq.txt" >"$tmp/out" 2>&1 && has "token ids occur" && has "--draft-vocab 256"'
# header, then "id count" lines with non-increasing counts, ids in range and distinct
check "frequency file format" \
  'cp "$tmp/freq.txt" "$tmp/out"; has "nextn-draft-vocab 1" && has "n_vocab 512" && grep -qE "^fingerprint [0-9a-f]{16}$" "$tmp/freq.txt" && awk '"'"'/^[0-9]+ [0-9]+$/ { if (n && $2 > last) bad = 1; if ($1 >= 512 || seen[$1]++) bad = 1; last = $2; n++ } END { exit bad || n < 100 }'"'"' "$tmp/freq.txt"'
# the counts add up to the "tokens" header line
check "counts add up to the token total" \
  'awk '"'"'/^tokens / { t = $2 } /^[0-9]+ [0-9]+$/ { s += $2 } END { exit !(t > 0 && s == t) }'"'"' "$tmp/freq.txt"'

R="--tokens 5,6,7,8,9 -n 40 --temp 0 --print-ids --ignore-eos -t 1"
"$NEXTN" run -m "$tmp/full.gguf" $R >"$tmp/plain.txt" 2>/dev/null
check "run --spec mtp --draft-vocab (file) == plain run" \
  '"$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --no-adaptive --draft-vocab 64 --draft-vocab-file "$tmp/freq.txt" >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain.txt" "$tmp/spec.txt" && has "draft vocabulary: 64 tokens (most frequent in"'
check "run --spec mtp --draft-vocab (lowest ids) == plain run" \
  '"$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --no-adaptive --draft-vocab 100 >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain.txt" "$tmp/spec.txt" && has "the lowest ids"'
check "run --spec mtp --draft-vocab sampled" \
  '"$NEXTN" run -m "$tmp/full.gguf" --tokens 5,6 -n 20 --temp 0.9 --seed 3 --print-ids -t 1 --spec mtp --draft-vocab 128 >"$tmp/spec.txt" 2>"$tmp/out" && has "generation"'
check "spec-bench --draft-vocab: outputs identical, draft step timed both ways" \
  '"$NEXTN" spec-bench -m "$tmp/full.gguf" -n 16 --prompt-len 8 --runs 1 -t 1 --no-adaptive --verify-cost --draft-vocab 64 --draft-vocab-file "$tmp/freq.txt" >"$tmp/out" 2>&1 && has "outputs identical" && has "whole vocabulary (512)" && has "with --draft-vocab 64"'
check "bench --spec mtp --draft-vocab" \
  '"$NEXTN" bench -m "$tmp/full.gguf" --spec mtp -p 8 -n 16 -r 1 -t 1 --draft-vocab 200 >"$tmp/out" 2>&1 && has "outputs identical"'

check "K larger than the vocabulary (run)" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --draft-vocab 513 >/dev/null 2>"$tmp/out" && has "--draft-vocab 513 out of range (1..512"'
check "K larger than the vocabulary (spec-bench)" \
  '! "$NEXTN" spec-bench -m "$tmp/full.gguf" -n 4 --runs 1 --draft-vocab 9999 >"$tmp/out" 2>&1 && has "--draft-vocab 9999 out of range (1..512"'
"$NEXTN" draft-vocab -m "$tmp/v600.gguf" -f "$text" -o "$tmp/freq600.txt" >/dev/null 2>&1
check "file of another model (vocabulary size)" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --draft-vocab 64 --draft-vocab-file "$tmp/freq600.txt" >/dev/null 2>"$tmp/out" && has "freq600.txt was made for a vocabulary of 600 tokens, the model has 512"'
sed 's/^fingerprint .*/fingerprint 0123456789abcdef/' "$tmp/freq.txt" >"$tmp/other_tok.txt"
check "file of another tokenizer (fingerprint)" \
  '! "$NEXTN" spec-bench -m "$tmp/full.gguf" -n 4 --runs 1 --draft-vocab 64 --draft-vocab-file "$tmp/other_tok.txt" >"$tmp/out" 2>&1 && has "tokenizer fingerprint 0123456789abcdef differs"'
{ head -n 6 "$tmp/freq.txt"; echo "7 x"; } >"$tmp/bad.txt"
check "malformed entry: error names the line" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --draft-vocab 8 --draft-vocab-file "$tmp/bad.txt" >/dev/null 2>"$tmp/out" && has "bad.txt line 7: expected '"'"'<id> <count>'"'"'"'
{ head -n 6 "$tmp/freq.txt"; echo "3 1"; echo "4 5"; } >"$tmp/bad2.txt"
check "increasing counts refused" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --draft-vocab 8 --draft-vocab-file "$tmp/bad2.txt" >/dev/null 2>"$tmp/out" && has "counts must not increase"'
check "not a frequency file" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --draft-vocab 8 --draft-vocab-file "$text" >/dev/null 2>"$tmp/out" && has "not a frequency file"'
check "missing file" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --draft-vocab 8 --draft-vocab-file "$tmp/nope.txt" >/dev/null 2>"$tmp/out" && has "nope.txt: cannot open"'
check "file without K" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --draft-vocab-file "$tmp/freq.txt" >/dev/null 2>"$tmp/out" && has "needs --draft-vocab K"'
check "draft-vocab: missing arguments, empty text" \
  '! "$NEXTN" draft-vocab -m "$tmp/full.gguf" >"$tmp/out" 2>&1 && has "required" && : >"$tmp/empty.txt" && ! "$NEXTN" draft-vocab -m "$tmp/full.gguf" -f "$tmp/empty.txt" -o "$tmp/x" >"$tmp/out" 2>&1 && has "no tokens"'

# automatic: "<model>.draft-vocab.txt" beside the model is used with K = V/4 (128 of 512) when
# --draft-vocab is not given; --draft-vocab 0 turns it off; a sibling of another tokenizer is
# an error that says where the file came from
cp "$tmp/full.gguf" "$tmp/auto.gguf"
cp "$tmp/freq.txt" "$tmp/auto.draft-vocab.txt"
check "run --spec mtp picks up <model>.draft-vocab.txt (K = V/4), output == plain" \
  '"$NEXTN" run -m "$tmp/auto.gguf" $R --spec mtp --no-adaptive >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain.txt" "$tmp/spec.txt" && has "draft vocabulary: 128 tokens (most frequent in $tmp/auto.draft-vocab.txt)"'
check "run --spec mtp --draft-vocab 0: whole vocabulary" \
  '"$NEXTN" run -m "$tmp/auto.gguf" $R --spec mtp --no-adaptive --draft-vocab 0 >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain.txt" "$tmp/spec.txt" && ! grep -q "draft vocabulary" "$tmp/out"'
check "spec-bench picks up <model>.draft-vocab.txt, outputs identical" \
  '"$NEXTN" spec-bench -m "$tmp/auto.gguf" -n 16 --prompt-len 8 --runs 1 -t 1 --verify-cost >"$tmp/out" 2>&1 && has "draft vocabulary: 128 tokens" && has "found beside the model" && has "outputs identical" && has "with --draft-vocab 128"'
check "spec-bench --draft-vocab 0: whole vocabulary" \
  '"$NEXTN" spec-bench -m "$tmp/auto.gguf" -n 8 --prompt-len 8 --runs 1 -t 1 --draft-vocab 0 >"$tmp/out" 2>&1 && has "outputs identical" && ! grep -q "draft vocabulary" "$tmp/out"'
cp "$tmp/other_tok.txt" "$tmp/auto.draft-vocab.txt"
check "a sibling file of another tokenizer: error names where it came from" \
  '! "$NEXTN" run -m "$tmp/auto.gguf" $R --spec mtp >/dev/null 2>"$tmp/out" && has "found beside the model" && has "tokenizer fingerprint 0123456789abcdef differs"'
check "plain run ignores the sibling file" \
  '"$NEXTN" run -m "$tmp/auto.gguf" $R >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain.txt" "$tmp/spec.txt"'

# no file, a vocabulary of 32768+ tokens: the V/4 lowest ids (merge rank) by default; smaller
# vocabularies keep the whole one (the 512-token model above printed no draft vocabulary line)
"$NEXTN" mkmodel --preset tiny --seed 3 --vocab 32768 -o "$tmp/v32k.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel --vocab 32768"; fail=1; }
"$NEXTN" run -m "$tmp/v32k.gguf" $R >"$tmp/plain32.txt" 2>/dev/null
check "32768 tokens, no file: the V/4 lowest ids by default, output == plain" \
  '"$NEXTN" run -m "$tmp/v32k.gguf" $R --spec mtp --no-adaptive >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain32.txt" "$tmp/spec.txt" && has "draft vocabulary: 8192 tokens (the lowest ids)"'
check "spec-bench says where the default came from; --draft-vocab 0 turns it off" \
  '"$NEXTN" spec-bench -m "$tmp/v32k.gguf" -n 8 --prompt-len 8 --runs 1 -t 1 >"$tmp/out" 2>&1 && has "draft vocabulary: 8192 tokens (the lowest ids = merge rank" && has "outputs identical" && "$NEXTN" spec-bench -m "$tmp/v32k.gguf" -n 8 --prompt-len 8 --runs 1 -t 1 --draft-vocab 0 >"$tmp/out" 2>&1 && ! grep -q "draft vocabulary" "$tmp/out"'

# the trained demo model: a frequency list from real text, output identical to plain decoding
demo="$NEXTN_SRC/models/nextn-demo.gguf"
if [ -f "$demo" ]; then
  D="-p \"The LORD is my shepherd; I shall not want.\" -n 48 --temp 0 --print-ids --ignore-eos -t 1"
  eval "\"\$NEXTN\" run -m \"\$demo\" $D" >"$tmp/dplain.txt" 2>/dev/null
  check "demo model: draft-vocab 1024 from a text == plain" \
    '"$NEXTN" draft-vocab -m "$demo" -f "$text" -o "$tmp/dfreq.txt" >/dev/null 2>&1 && eval "\"\$NEXTN\" run -m \"\$demo\" $D --spec mtp --no-adaptive --draft-vocab 1024 --draft-vocab-file \"\$tmp/dfreq.txt\"" >"$tmp/dspec.txt" 2>"$tmp/out" && cmp -s "$tmp/dplain.txt" "$tmp/dspec.txt" && has "acceptance"'
else
  echo "FAIL: $demo missing"; fail=1
fi
exit $fail
