#!/usr/bin/env bash
# test_perplexity_quant.sh - files in the low-bit formats, against llama.cpp:
#  1. a "dynamic" mix (q3_k_m plus --tensor-type overrides: q2_K, q3_K, q4_K, q5_K, q6_K, q8_0,
#     iq4_xs, iq4_nl tensors in one file) made by `nextn quantize` from the tiny f16 model is byte
#     for byte llama-quantize's file (sha256 recorded), `nextn info` shows its type mix, and its
#     perplexity agrees with llama-perplexity's on the same file;
#  2. the demo model quantised to iq4_xs (rows of 128: iq4_nl, q5_1 and q8_0 fallbacks) likewise,
#     and to q3_k_m (byte identity only).
# Fixtures and commands: tests/fixtures/README.md (perplexity/).
. "$(dirname "$0")/lib.sh"
src="${NEXTN_SRC:-.}"
fx="$src/tests/fixtures/perplexity"

# relative difference of a and b within tol
close() { awk -v a="$1" -v b="$2" -v tol="$3" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= tol * (b < 0 ? -b : b)) }'; }

# compare nextn's perplexity output ($1) with a llama-perplexity fixture ($2): final PPL within
# $3, +/- within $4, each running value within $5 (relative)
compare_ppl() {
    local got_ppl got_err want_ppl want_err
    got_ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$1")
    got_err=$(sed -n 's/^Final estimate: PPL = [0-9.]* +\/- \([0-9.]*\)$/\1/p' "$1")
    want_ppl=$(sed -n 's/^Final estimate: PPL = \([0-9.]*\) .*/\1/p' "$2")
    want_err=$(sed -n 's/^Final estimate: PPL = [0-9.]* +\/- \([0-9.]*\)$/\1/p' "$2")
    echo "  nextn PPL $got_ppl +/- $got_err, llama.cpp $want_ppl +/- $want_err"
    close "$got_ppl" "$want_ppl" "$3" && close "$got_err" "$want_err" "$4" &&
        paste <(grep "^\[1\]" "$1" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") \
              <(sed -n 1p "$2" | tr "," "\n" | sed -n "s/^\[[0-9]*\]//p") |
        awk -v tol="$5" '{ n++; d = $1 - $2; if (d < 0) d = -d; if (d > tol * $2) bad++ } END { exit (bad > 0 || n != 8) }'
}

# ---- 1. the dynamic mix
"$NEXTN" mkmodel --preset tiny --type f16 -o "$tmp/f16.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
"$NEXTN" quantize "$tmp/f16.gguf" "$tmp/dyn.gguf" q3_k_m -q -t 2 \
    --tensor-type ffn_up=iq4_xs --tensor-type ffn_gate=q2_k --tensor-type attn_qkv=iq4_nl \
    --tensor-type 'blk\.[0-2]\.ffn_down=q8_0' --tensor-type ssm_out=q5_k --tensor-type attn_gate=q4_k ||
    { echo "FAIL: quantize"; exit 1; }
check "dynamic mix: byte-identical to llama-quantize's file" \
      '[ "$(sha256sum "$tmp/dyn.gguf" | cut -d" " -f1)" = 7ae19a9be7ccbc0fab8cc1c6e171f0029de91be31af4efd8d557e91e6ba1bbe2 ]'
"$NEXTN" info --no-tensors "$tmp/dyn.gguf" >"$tmp/info.out"
check "info shows the type mix with bits per weight" \
      'for t in q2_K q3_K q4_K q5_K q6_K q8_0 iq4_nl iq4_xs; do grep -Eq "^  $t +[0-9]+ tensors? .*% of parameters, +[0-9.]+ bpw$" "$tmp/info.out" || exit 1; done;
       grep -Eq "^  q2_K +7 tensors .*, +2\.62 bpw$" "$tmp/info.out" && grep -Eq "^  iq4_xs +7 tensors .*, +4\.25 bpw$" "$tmp/info.out" &&
       grep -q "bits per weight$" "$tmp/info.out"'
"$NEXTN" perplexity -m "$tmp/dyn.gguf" -f "$fx/text.txt" -c 64 --chunks 8 -t 2 >"$tmp/dyn.out" 2>"$tmp/dyn.err"
check "dynamic mix: perplexity agrees with llama-perplexity" 'compare_ppl "$tmp/dyn.out" "$fx/llama-perplexity-tiny-dyn.txt" 5e-3 1e-2 1.2e-2'

# ---- 2. the demo model in iq4_xs
"$NEXTN" quantize "$src/models/nextn-demo.gguf" "$tmp/demo.gguf" iq4_xs -q -t 2 || { echo "FAIL: quantize demo"; exit 1; }
check "demo iq4_xs: byte-identical to llama-quantize's file" \
      '[ "$(sha256sum "$tmp/demo.gguf" | cut -d" " -f1)" = 8cda37840983a7d5998f3334d0467102e5c04f178572bb5f1e249bfb34bde696 ]'
"$NEXTN" perplexity -m "$tmp/demo.gguf" -f "$fx/text.txt" -c 64 --chunks 8 -t 2 >"$tmp/demo.out" 2>"$tmp/demo.err"
check "demo iq4_xs: perplexity agrees with llama-perplexity" 'compare_ppl "$tmp/demo.out" "$fx/llama-perplexity-demo-iq4_xs.txt" 5e-3 1e-2 1.2e-2'
# q3_k_m on the demo model's 21 blocks: ffn_down of block 0 (< 21/16) gets Q5_K, the rest Q4_K
# (both falling back for rows of 128: q5_1 / q5_0) - a rule the tiny models are too shallow to show
"$NEXTN" quantize "$src/models/nextn-demo.gguf" "$tmp/demo3.gguf" q3_k_m -q -t 2 || { echo "FAIL: quantize demo q3_k_m"; exit 1; }
check "demo q3_k_m: byte-identical to llama-quantize's file" \
      '[ "$(sha256sum "$tmp/demo3.gguf" | cut -d" " -f1)" = 554015b83fd1e906491200f32982a34742efc096972aeff240e0ac4b4697b017 ]'
exit $fail
