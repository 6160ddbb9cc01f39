#!/usr/bin/env bash
# test_bench.sh - `nextn bench` prints pp/tg rows with median/min/max and peak RSS; bad flags fail.
. "$(dirname "$0")/lib.sh"
model="$tmp/tiny.gguf"
tiny_model "$model"

check "bench prints pp and tg rows with three positive rates" \
      '"$NEXTN" bench -m "$model" -p 16 -n 8 -r 3 >"$tmp/o" 2>"$tmp/e" &&
       awk "/^pp16 /{ if (\$2 == 16 && \$3 == 3 && \$4 > 0 && \$5 > 0 && \$6 > 0 && \$5 <= \$4 && \$4 <= \$6) ok++ }
            /^tg8 / { if (\$2 == 8  && \$3 == 3 && \$4 > 0 && \$5 > 0 && \$6 > 0 && \$5 <= \$4 && \$4 <= \$6) ok++ }
            END { exit ok == 2 ? 0 : 1 }" "$tmp/o" && grep -q "^peak RSS: [0-9.]* MiB" "$tmp/o"'
# -d D: rows named as llama-bench's "pp16 @ d32", the tests continue the D-token context
check "-d runs pp and tg after the depth context" \
      '"$NEXTN" bench -m "$model" -p 16 -n 8 -d 40 -r 2 >"$tmp/o" 2>"$tmp/e" &&
       awk "/^pp16@d40 /{ if (\$2 == 16 && \$3 == 2 && \$4 > 0) ok++ } /^tg8@d40 /{ if (\$2 == 8 && \$3 == 2 && \$4 > 0) ok++ }
            END { exit ok == 2 ? 0 : 1 }" "$tmp/o" && grep -q "^depth: 40 tokens of context" "$tmp/o" &&
       grep -q "^depth: the last test ended at position 48$" "$tmp/o"'
check "-d sizes the context: KV per sequence grows with the depth" \
      '"$NEXTN" bench -m "$model" -p 64 -n 0 -r 1 >"$tmp/o0" 2>&1 && "$NEXTN" bench -m "$model" -p 64 -n 0 -d 960 -r 1 >"$tmp/o1" 2>&1 &&
       k0=$(sed -n "s/^memory: .*KV \([0-9.]*\) MiB.*/\1/p" "$tmp/o0") && k1=$(sed -n "s/^memory: .*KV \([0-9.]*\) MiB.*/\1/p" "$tmp/o1") &&
       awk -v a="$k0" -v b="$k1" "BEGIN { exit (b > 8 * a && a > 0) ? 0 : 1 }"'
check "-d -1 exits 2" 'out=$("$NEXTN" bench -m "$model" -d -1 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "--n-depth"'
check "-n 0 skips the decode test" '"$NEXTN" bench -m "$model" -p 8 -n 0 -r 1 >"$tmp/o" 2>&1 && grep -q "^pp8 " "$tmp/o" && ! grep -q "^tg" "$tmp/o"'
check "-p 0 -n 0 exits 2" 'out=$("$NEXTN" bench -m "$model" -p 0 -n 0 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "nothing to measure"'
check "-r 0 exits 2 with the range" 'out=$("$NEXTN" bench -m "$model" -r 0 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "--repetitions: 0 is outside \[1, 1000\]"'
check "missing -m exits 2" 'out=$("$NEXTN" bench 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "-m FILE"'
check "missing model exits 1 naming it" 'out=$("$NEXTN" bench -m "$tmp/nope.gguf" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "nope.gguf"'
check "--help documents --spec mtp (spec-bench under another name)" \
      '"$NEXTN" bench --help >"$tmp/o" 2>&1 && grep -q "nextn bench --spec mtp" "$tmp/o" && grep -q "runs .nextn spec-bench. instead" "$tmp/o"'
exit $fail
