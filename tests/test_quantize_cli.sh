#!/usr/bin/env bash
# test_quantize_cli.sh - `nextn quantize` from the command line: output, --force, usage errors.
. "$(dirname "$0")/lib.sh"
"$NEXTN" convert "$NEXTN_SRC/tests/fixtures/hf-qwen35-a" -o "$tmp/a.gguf" -q || { echo "FAIL: convert"; exit 1; }
check "quantizes; no progress line in a pipe" '"$NEXTN" quantize "$tmp/a.gguf" "$tmp/q.gguf" q4_k_m -t 2 2>"$tmp/log" && ! grep -q "MB/s" "$tmp/log" && "$NEXTN" info "$tmp/q.gguf" | grep -q q5_0'
check "progress on a terminal: tensor i/N, MB/s, ETA, target type" \
  'script -qec "\"$NEXTN\" quantize \"$tmp/a.gguf\" \"$tmp/q2.gguf\" q4_k_m -t 2" "$tmp/pty.log" </dev/null >/dev/null && grep -qa "tensor [0-9]*/[0-9]* .*MB/s  ETA.* -> q" "$tmp/pty.log" && cmp -s "$tmp/q.gguf" "$tmp/q2.gguf"'
check "refuses to overwrite"        'out=$("$NEXTN" quantize "$tmp/a.gguf" "$tmp/q.gguf" q8_0 -q 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "use --force"'
check "--force replaces"            '"$NEXTN" quantize "$tmp/a.gguf" "$tmp/q.gguf" Q8_0 --force -q'
check "unknown type is a usage error" 'out=$("$NEXTN" quantize "$tmp/a.gguf" "$tmp/x.gguf" q1_k 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "q1_k"'
check "--tensor-type overrides a tensor's type" '"$NEXTN" quantize "$tmp/a.gguf" "$tmp/o.gguf" q8_0 -q --tensor-type "blk\.0\.ffn_up=q5_1" --tensor-type FFN_DOWN=F16 && "$NEXTN" info "$tmp/o.gguf" >"$tmp/oi" && grep -Eq "blk\.0\.ffn_up\.weight +q5_1 " "$tmp/oi" && grep -Eq "blk\.1\.ffn_up\.weight +q8_0 " "$tmp/oi" && grep -Eq "blk\.0\.ffn_down\.weight +f16 " "$tmp/oi"'
check "bad --tensor-type is a usage error" 'out=$("$NEXTN" quantize "$tmp/a.gguf" "$tmp/x.gguf" q8_0 --tensor-type ffn_up=iq2_xs 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "iq2_xs"'
check "a quantised input is refused, naming --allow-requantize" 'out=$("$NEXTN" quantize "$tmp/q.gguf" "$tmp/r.gguf" q4_0 -q 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "already quantised (q8_0).*--allow-requantize" && [ ! -e "$tmp/r.gguf" ]'
check "--allow-requantize re-quantises" '"$NEXTN" quantize "$tmp/q.gguf" "$tmp/r.gguf" q4_0 -q --allow-requantize && "$NEXTN" info "$tmp/r.gguf" | grep -Eq "blk\.0\.ffn_up\.weight +q4_0 "'
check "--pure, --output-tensor-type, --token-embedding-type" '"$NEXTN" quantize "$tmp/a.gguf" "$tmp/p.gguf" q4_0 -q --pure --token-embedding-type q8_0 && "$NEXTN" info "$tmp/p.gguf" >"$tmp/pi" && grep -Eq "token_embd\.weight +q8_0 " "$tmp/pi" && grep -Eq "blk\.0\.ffn_down\.weight +q4_0 " "$tmp/pi"'
check "--output-tensor-type with an unknown type is a usage error" 'out=$("$NEXTN" quantize "$tmp/a.gguf" "$tmp/x.gguf" q8_0 --output-tensor-type q9 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "output-tensor-type.*q9"'
check "missing input is an error"   'out=$("$NEXTN" quantize "$tmp/none.gguf" "$tmp/x.gguf" q8_0 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "none.gguf"'
check "bad -t is a usage error"     '"$NEXTN" quantize "$tmp/a.gguf" "$tmp/x.gguf" q8_0 -t 0 2>/dev/null; [ $? -eq 2 ]'
# q4_k_m on the demo model (rows of 128 and 384, not multiples of q4_K's 256): every tensor that
# falls back is named with the wanted and the used type, as llama-quantize does, and the size per
# weight at the end is the one `nextn info` computes from the output file
"$NEXTN" quantize "$demo_model" "$tmp/d.gguf" q4_k_m 2>"$tmp/dlog" && "$NEXTN" info "$tmp/d.gguf" >"$tmp/di"
check "q4_k_m fallbacks are printed per tensor: name, wanted type, used type, why" \
  'grep -q "^nextn quantize: blk\.0\.ffn_up\.weight: rows of 128 are not a multiple of 256, required for q4_K - using q5_0 instead$" "$tmp/dlog" &&
   grep -q "^nextn quantize: blk\.0\.ffn_down\.weight: rows of 384 are not a multiple of 256, required for q6_K - using q8_0 instead$" "$tmp/dlog"'
# every matrix of the output in q5_0 / q8_0 / q5_1 / f16 (no K type fits 128 / 384) is one fallback line
check "one fallback line per tensor that fell back, and the count" \
  'n=$(awk "\$3 ~ /^(q5_0|q8_0|q5_1|f16)\$/ && \$2 ~ /weight\$/ && \$2 != \"output.weight\" && \$2 != \"token_embd.weight\"" "$tmp/di" | wc -l) &&
   [ "$n" -gt 100 ] && [ "$(grep -c " - using .* instead$" "$tmp/dlog")" -eq "$n" ] && grep -q "^nextn quantize: $n of 282 tensors fell back" "$tmp/dlog"'
check "the resulting bits per weight are printed, equal to info's" \
  'b=$(sed -n "s/^totals: .*, \([0-9.]*\) bits per weight$/\1/p" "$tmp/di") && [ -n "$b" ] &&
   grep -q "^nextn quantize: size [0-9.]* MiB (32.00 bpw) -> [0-9.]* MiB ($b bpw)$" "$tmp/dlog"'
check "-q prints no fallback line" \
  '"$NEXTN" quantize -q "$demo_model" "$tmp/d2.gguf" q4_k_m 2>"$tmp/dlog2" && [ ! -s "$tmp/dlog2" ]'
exit $fail
