#!/usr/bin/env bash
# test_perplexity.sh - `nextn perplexity` against an independent computation of llama-perplexity's
# method: each chunk's logits are dumped by `nextn eval` and the negative log-likelihood of the
# second half is recomputed here with awk (log-sum-exp per row), as are the running values and
# the +/- estimate.  Then: the same figure for every batching (-b smaller than, equal to and a
# multiple of -c), text input, and the errors.
. "$(dirname "$0")/lib.sh"
model="$tmp/tiny.gguf"
tiny_model "$model" --seed 5
nv=512
nctx=16
# 3 chunks of 16 (+ 5 tokens that do not fill a chunk and are ignored)
toks=$(awk 'BEGIN { x = 12345; for (i = 0; i < 53; i++) { x = (x * 1103515245 + 12345) % 2147483648; printf "%s%d", (i ? "," : ""), x % 500 } }')

# ---- reference: per chunk, eval the chunk and score rows first..nctx-2 against the next token
: >"$tmp/nll.txt"
for c in 0 1 2; do
    chunk=$(echo "$toks" | tr ',' '\n' | sed -n "$((c * nctx + 1)),$(((c + 1) * nctx))p" | paste -sd, -)
    "$NEXTN" eval -m "$model" --tokens "$chunk" --dump-logits "$tmp/c$c.bin" >/dev/null 2>&1 || { echo "FAIL: eval chunk $c"; exit 1; }
    od -An -v -f -w$((nv * 4)) "$tmp/c$c.bin" | awk -v toks="$chunk" -v nctx=$nctx -v chunk=$c '
        BEGIN { n = split(toks, t, ","); first = int(nctx / 2) }
        { p = NR - 1
          if (p >= first && p <= nctx - 2) {
              mx = $1; for (i = 2; i <= NF; i++) if ($i > mx) mx = $i
              s = 0; for (i = 1; i <= NF; i++) s += exp($i - mx)
              target = t[p + 2]                  # token at position p + 1 (awk arrays are 1-based)
              print chunk, log(s) + mx - $(target + 1)
          } }' >>"$tmp/nll.txt"
done
ref=$(awk '{ nll += $2; nll2 += $2 * $2; n++; if ($1 != last) { } cum[$1] = nll; cnt[$1] = n; last = $1 }
           END { for (c = 0; c < 3; c++) printf "[%d]%.4f,", c + 1, exp(cum[c] / cnt[c]);
                 m = nll / n; v = nll2 / n - m * m; ppl = exp(m)
                 printf " %.6f %.6f %d\n", ppl, sqrt(v / (n - 1)) * ppl, n }' "$tmp/nll.txt")
ref_running=$(echo "$ref" | awk '{ print $1 }')
ref_ppl=$(echo "$ref" | awk '{ print $2 }')
ref_err=$(echo "$ref" | awk '{ print $3 }')
ref_n=$(echo "$ref" | awk '{ print $4 }')
echo "reference: $ref_running PPL $ref_ppl +/- $ref_err over $ref_n tokens"
check "reference scored 3 chunks x 7 tokens" '[ "$ref_n" -eq 21 ]'

close() { awk -v a="$1" -v b="$2" -v tol="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= tol * (b < 0 ? -b : b)) }'; }
for b in 4 16 48 2048; do
    "$NEXTN" perplexity -m "$model" --tokens "$toks" -c $nctx -b $b >"$tmp/p$b.out" 2>"$tmp/p$b.err"
    rc=$?
    got_ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\)$/\1/p' "$tmp/p$b.out")
    got_err=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\)$/\2/p' "$tmp/p$b.out")
    got_running=$(grep '^\[1\]' "$tmp/p$b.out")
    check "-b $b: exit 0 and a final estimate" '[ $rc -eq 0 ] && [ -n "$got_ppl" ]'
    check "-b $b: PPL matches the independent computation" 'close "$got_ppl" "$ref_ppl" 2e-4'
    check "-b $b: +/- matches" 'close "$got_err" "$ref_err" 2e-3'
    check "-b $b: three running values matching the reference" \
          '[ $(echo "$got_running" | grep -o "\[[0-9]*\]" | wc -l) -eq 3 ] &&
           paste <(echo "$got_running" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") <(echo "$ref_running" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") |
           awk "{ d = \$1 - \$2; if (d < 0) d = -d; if (d > 2e-4 * \$2 + 1e-4) bad++ } END { exit bad > 0 }"'
done
check "-b 48 decodes 3 chunks side by side" 'grep -q "n_seq 3" "$tmp/p48.err"'
check "-b 4 decodes each chunk in 4 batches (n_seq 1)" 'grep -q "n_batch 4, n_seq 1" "$tmp/p4.err"'
check "--chunks 1 scores only the first chunk" \
      '"$NEXTN" perplexity -m "$model" --tokens "$toks" -c $nctx --chunks 1 >"$tmp/o" 2>/dev/null &&
       close "$(sed -n "s/^\[1\]\([0-9.]*\),$/\1/p" "$tmp/o")" "$(echo "$ref_running" | sed -n "s/^\[1\]\([0-9.]*\),.*/\1/p")" 2e-4 &&
       ! grep -q "\[2\]" "$tmp/o"'

# ---- text input
awk 'BEGIN { for (i = 0; i < 6; i++) printf "the quick brown fox %d jumps over the lazy dog. ", i }' >"$tmp/text.txt"
check "text file input gives a final estimate" \
      '"$NEXTN" perplexity -m "$model" -f "$tmp/text.txt" -c 16 --chunks 3 >"$tmp/o" 2>"$tmp/e" && grep -q "^Final estimate: PPL = [0-9.]* +/- [0-9.]*$" "$tmp/o"'

# ---- the same figures as llama.cpp's llama-perplexity (fixture: its output on the seed-42 tiny model)
fx="${NEXTN_SRC:-.}/tests/fixtures/perplexity"
"$NEXTN" mkmodel --preset tiny --type f32 --seed 42 -o "$tmp/t42.gguf" >/dev/null 2>&1
"$NEXTN" perplexity -m "$tmp/t42.gguf" -f "$fx/text.txt" -c 64 --chunks 8 >"$tmp/l.out" 2>"$tmp/l.err"
want_running=$(sed -n 1p "$fx/llama-perplexity.txt")
want_ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\)$/\1/p' "$fx/llama-perplexity.txt")
want_err=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\)$/\2/p' "$fx/llama-perplexity.txt")
check "llama-perplexity fixture: final PPL agrees to 1e-4" \
      'close "$(sed -n "s/^Final estimate: PPL = \([0-9.]*\) .*/\1/p" "$tmp/l.out")" "$want_ppl" 1e-4'
check "llama-perplexity fixture: +/- agrees to 1e-3" \
      'close "$(sed -n "s/^Final estimate: PPL = [0-9.]* +\/- \([0-9.]*\)$/\1/p" "$tmp/l.out")" "$want_err" 1e-3'
check "llama-perplexity fixture: the 8 running values agree to 1e-4" \
      'paste <(grep "^\[1\]" "$tmp/l.out" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") <(echo "$want_running" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") |
       awk "{ n++; d = \$1 - \$2; if (d < 0) d = -d; if (d > 1e-4 * \$2) bad++ } END { exit (bad > 0 || n != 8) }"'

# ---- the same for qwen35moe (tiny-moe, seed 42, the model of the MoE parity fixtures)
"$NEXTN" mkmodel --preset tiny-moe --type f32 --seed 42 -o "$tmp/m42.gguf" >/dev/null 2>&1
"$NEXTN" perplexity -m "$tmp/m42.gguf" -f "$fx/text.txt" -c 64 --chunks 8 >"$tmp/m.out" 2>"$tmp/m.err"
want_running=$(sed -n 1p "$fx/llama-perplexity-moe.txt")
want_ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\)$/\1/p' "$fx/llama-perplexity-moe.txt")
want_err=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) +\/- \([0-9.]*\)$/\2/p' "$fx/llama-perplexity-moe.txt")
check "MoE: llama-perplexity fixture: final PPL and +/- agree" \
      'close "$(sed -n "s/^Final estimate: PPL = \([0-9.]*\) .*/\1/p" "$tmp/m.out")" "$want_ppl" 1e-4 &&
       close "$(sed -n "s/^Final estimate: PPL = [0-9.]* +\/- \([0-9.]*\)$/\1/p" "$tmp/m.out")" "$want_err" 1e-3'
check "MoE: llama-perplexity fixture: the 8 running values agree to 1e-4" \
      'paste <(grep "^\[1\]" "$tmp/m.out" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") <(echo "$want_running" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") |
       awk "{ n++; d = \$1 - \$2; if (d < 0) d = -d; if (d > 1e-4 * \$2) bad++ } END { exit (bad > 0 || n != 8) }"'

# ---- quantized KV caches against llama-perplexity with the same -ctk/-ctv (fixtures made with
# LLAMA_ATTN_ROT_DISABLE=1 -fa on: the cells hold the same q8_0 / q4_0 blocks as nextn's; see
# tests/fixtures/README.md).  llama.cpp also rounds Q to q8_0 for its quantized-K dot product, which
# nextn does not: that rounding alone moves the figures by up to 8.7e-5 (q8_0) / 6.6e-4 (q4_0), so
# those are the tolerances' scale; the f16 cache's figures miss them (by up to 2.8e-4 / 5.4e-3).
for t in q8_0 q4_0; do
    "$NEXTN" perplexity -m "$tmp/t42.gguf" -f "$fx/text.txt" -c 64 --chunks 8 -ctk $t -ctv $t >"$tmp/kv$t.out" 2>"$tmp/kv$t.err"
    if [ $t = q8_0 ]; then tf=8e-5; tr=1.2e-4; else tf=2e-4; tr=1.5e-3; fi
    want="$fx/llama-perplexity-kv-$t.txt"
    echo "  $t: nextn $(grep -o "PPL = .*" "$tmp/kv$t.out"), llama.cpp $(grep -o "PPL = .*" "$want")"
    check "-ctk $t -ctv $t: final PPL within $tf of llama-perplexity's, +/- within 1e-3" \
          'close "$(sed -n "s/^Final estimate: PPL = \([0-9.]*\) .*/\1/p" "$tmp/kv$t.out")" "$(sed -n "s/^Final estimate: PPL = \([0-9.]*\) .*/\1/p" "$want")" $tf &&
           close "$(sed -n "s/^Final estimate: PPL = [0-9.]* +\/- \([0-9.]*\)$/\1/p" "$tmp/kv$t.out")" "$(sed -n "s/^Final estimate: PPL = [0-9.]* +\/- \([0-9.]*\)$/\1/p" "$want")" 1e-3'
    check "-ctk $t -ctv $t: the 8 running values within $tr" \
          'paste <(grep "^\[1\]" "$tmp/kv$t.out" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") <(sed -n 1p "$want" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") |
           awk -v tol=$tr "{ n++; d = \$1 - \$2; if (d < 0) d = -d; if (d > tol * \$2) bad++ } END { exit (bad > 0 || n != 8) }"'
    check "-ctk $t -ctv $t: the memory line names the type" 'grep -q "KV cache [0-9.]* MiB ($t, n_ctx 64" "$tmp/kv$t.err"'
done

# ---- errors
check "too few tokens exits 1 and names the need" \
      'out=$("$NEXTN" perplexity -m "$model" --tokens 1,2,3,4,5 -c 4 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "need at least 2 \* n_ctx = 8 tokens"'
check "missing text file exits 1 naming it" \
      'out=$("$NEXTN" perplexity -m "$model" -f "$tmp/missing.txt" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "missing.txt"'
check "-f and --tokens together exit 2" 'out=$("$NEXTN" perplexity -m "$model" -f x --tokens 1 2>&1); [ $? -eq 2 ]'
check "-c 1 exits 2 with the range" 'out=$("$NEXTN" perplexity -m "$model" -f x -c 1 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q -- "--ctx-size: 1 is outside"'
exit $fail
