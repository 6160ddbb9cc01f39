#!/usr/bin/env bash
# test_eval.sh - `nextn eval` writes float32 [n_tokens][n_vocab]; batching does not change rows;
# errors are clear and leave no partial file.
. "$(dirname "$0")/lib.sh"
model="$tmp/tiny.gguf"
tiny_model "$model"
nv=512

check "dump has n_tokens x n_vocab float32" \
      '"$NEXTN" eval -m "$model" --tokens 10,20,30,40,50 --dump-logits "$tmp/a.bin" >"$tmp/o" 2>&1 &&
       [ $(stat -c %s "$tmp/a.bin") -eq $((5 * nv * 4)) ] && grep -q "5 tokens x 512 vocab" "$tmp/o"'
check "rows are finite and not all equal" \
      '! od -An -v -f "$tmp/a.bin" | grep -qiE "nan|inf" &&
       [ $(od -An -v -f -w4 "$tmp/a.bin" | sort -u | wc -l) -gt 100 ]'
# the first rows of a longer input equal the short input's rows (causality), within float tolerance
check "prefix rows do not depend on later tokens or on the batch size" \
      '"$NEXTN" eval -m "$model" --tokens 10,20,30,40,50,60,70 -b 3 --dump-logits "$tmp/b.bin" >/dev/null 2>&1 &&
       head -c $((5 * nv * 4)) "$tmp/b.bin" >"$tmp/b5.bin" &&
       paste <(od -An -v -f -w4 "$tmp/a.bin") <(od -An -v -f -w4 "$tmp/b5.bin") |
       awk "{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 1e-3 * (1 + (\$1 < 0 ? -\$1 : \$1))) bad++ } END { exit bad > 0 }"'
check "text input works" '"$NEXTN" eval -m "$model" -p "hello" --dump-logits "$tmp/c.bin" >/dev/null 2>&1 && [ -s "$tmp/c.bin" ]'
check "missing --dump-logits exits 2" 'out=$("$NEXTN" eval -m "$model" --tokens 1 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "--dump-logits"'
check "unwritable output exits 1 naming it" \
      'out=$("$NEXTN" eval -m "$model" --tokens 1 --dump-logits "$tmp/no/dir/x.bin" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "no/dir/x.bin"'
check "bad id exits 1, no output file left" \
      'out=$("$NEXTN" eval -m "$model" --tokens 1,512 --dump-logits "$tmp/d.bin" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "item 2 (id 512)" && [ ! -e "$tmp/d.bin" ]'
exit $fail
