#!/usr/bin/env bash
# test_spec_cli.sh - `nextn spec-bench` and `nextn mtp-extract` on synthetic tiny models: greedy
# speculative output identical to plain (the command checks it), oracle acceptance 100%, the MTP
# head found in the model / next to it / given explicitly, and clear errors for bad MTP files.
. "$(dirname "$0")/lib.sh"
check_show="$tmp/out"

"$NEXTN" mkmodel --preset tiny --seed 3 -o "$tmp/full.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
mkdir "$tmp/dir"
"$NEXTN" mkmodel --preset tiny --seed 3 --no-mtp -o "$tmp/dir/model.gguf" >/dev/null 2>&1 || exit 1
"$NEXTN" mkmodel --preset tiny --seed 3 --vocab 600 -o "$tmp/v600.gguf" >/dev/null 2>&1 || exit 1
B="-n 16 --prompt-len 8 --runs 1 -t 1"

check "greedy spec == plain, MTP from the model file" \
  '"$NEXTN" spec-bench -m "$tmp/full.gguf" $B --no-adaptive >"$tmp/out" 2>&1 && has "outputs identical" && has "MTP head from $tmp/full.gguf"'
check "two sequences, draft-max 2, draft-min 2, p-min 0.001" \
  '"$NEXTN" spec-bench -m "$tmp/full.gguf" $B --seqs 2 --draft-max 2 --draft-min 2 --draft-p-min 0.001 >"$tmp/out" 2>&1 && has "outputs identical"'
check "oracle: every draft accepted" \
  '"$NEXTN" spec-bench -m "$tmp/full.gguf" $B --spec-oracle >"$tmp/out" 2>&1 && has "acceptance 100.0%" && has "(oracle)"'
check "verify cost table" \
  '"$NEXTN" spec-bench -m "$tmp/full.gguf" $B --verify-cost --draft-max 2 >"$tmp/out" 2>&1 && has "3 rows:"'
check "sampling: speculative == plain (spec-bench checks it)" '"$NEXTN" spec-bench -m "$tmp/full.gguf" $B --temp 0.9 >"$tmp/out" 2>&1 && has "acceptance" && has "outputs identical"'
check "oracle while sampling: every draft accepted" \
  '"$NEXTN" spec-bench -m "$tmp/full.gguf" $B --spec-oracle --temp 1 --seed 4 >"$tmp/out" 2>&1 && has "acceptance 100.0%" && has "outputs identical"'
check "mtp-extract writes an mtp-only file" \
  '"$NEXTN" mtp-extract "$tmp/full.gguf" "$tmp/dir/mtp-model.gguf" >"$tmp/out" 2>&1 && "$NEXTN" info "$tmp/dir/mtp-model.gguf" >"$tmp/out" 2>&1 && ! grep -qF "blk.0.attn_norm.weight" "$tmp/out" && has "blk.6.nextn.eh_proj.weight"'
check "sibling mtp-model.gguf found automatically" \
  '"$NEXTN" spec-bench -m "$tmp/dir/model.gguf" $B >"$tmp/out" 2>&1 && has "MTP head from $tmp/dir/mtp-model.gguf" && has "outputs identical"'
check "--no-mtp: one-line notice, plain only" \
  '"$NEXTN" spec-bench -m "$tmp/dir/model.gguf" $B --no-mtp >"$tmp/out" 2>&1 && has "--no-mtp: plain decoding only" && ! grep -q "spec " "$tmp/out"'
rm "$tmp/dir/mtp-model.gguf"
check "no MTP anywhere: notice, plain only" \
  '"$NEXTN" spec-bench -m "$tmp/dir/model.gguf" $B >"$tmp/out" 2>&1 && has "plain decoding" && has "median of 1: plain"'
check "mismatched --mtp-model: clear error" \
  '! "$NEXTN" spec-bench -m "$tmp/dir/model.gguf" $B --mtp-model "$tmp/v600.gguf" >"$tmp/out" 2>&1 && has "v600.gguf: MTP vocabulary has 600 tokens, the model'"'"'s has 512"'
head -c 5000 "$tmp/full.gguf" >"$tmp/broken.gguf"
check "broken --mtp-model: clear error" \
  '! "$NEXTN" spec-bench -m "$tmp/dir/model.gguf" $B --mtp-model "$tmp/broken.gguf" >"$tmp/out" 2>&1 && has "MTP model" && has "broken.gguf"'
check "mtp-extract of a model without MTP" \
  '! "$NEXTN" mtp-extract "$tmp/dir/model.gguf" "$tmp/x.gguf" >"$tmp/out" 2>&1 && has "no MTP block"'
check "bad option values" \
  '! "$NEXTN" spec-bench -m "$tmp/full.gguf" --draft-max 40 >"$tmp/out" 2>&1 && has "--draft-max"'
# nextn run --spec mtp: same ids as plain greedy run (stdout), figures on stderr
R="--tokens 5,6,7,8,9 -n 40 --temp 0 --print-ids --ignore-eos -t 1"
"$NEXTN" run -m "$tmp/full.gguf" $R >"$tmp/plain.txt" 2>/dev/null
check "run --spec mtp == plain run (greedy ids)" \
  '"$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --draft-max 2 --no-adaptive >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain.txt" "$tmp/spec.txt" && has "acceptance" && has "tokens/step" && has "draft" && has "verify"'
check "run --spec mtp --no-mtp: notice, same ids" \
  '"$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --no-mtp >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain.txt" "$tmp/spec.txt" && has "plain decoding"'
check "run --spec mtp with a sampled temperature" \
  '"$NEXTN" run -m "$tmp/full.gguf" --tokens 5,6 -n 20 --temp 0.9 --seed 3 --print-ids -t 1 --spec mtp >"$tmp/spec.txt" 2>"$tmp/out" && has "generation"'
check "run --spec mtp with a mismatched --mtp-model" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R --spec mtp --mtp-model "$tmp/v600.gguf" >/dev/null 2>"$tmp/out" && has "vocabulary"'
# quantized attention caches (trunk and MTP head): greedy spec == plain greedy with the same types;
# the memory line reports the smaller cache (q8_0: 34 bytes per 32 values, q4_0: 18, f16: 64)
kvmib() { sed -n 's/.*KV cache \([0-9.]*\) MiB.*/\1/p' "$1"; }
"$NEXTN" run -m "$tmp/full.gguf" $R -c 8192 2>"$tmp/mem_f16.txt" >/dev/null
for t in q8_0 q4_0; do
  "$NEXTN" run -m "$tmp/full.gguf" $R -ctk $t -ctv $t >"$tmp/plain_$t.txt" 2>/dev/null
  check "run --spec mtp == plain run, -ctk $t -ctv $t" \
    '"$NEXTN" run -m "$tmp/full.gguf" $R -ctk $t -ctv $t --spec mtp --draft-max 3 --no-adaptive >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain_$t.txt" "$tmp/spec.txt" && has "acceptance"'
  check "bench --spec mtp, --cache-type-k $t --cache-type-v $t" \
    '"$NEXTN" bench -m "$tmp/full.gguf" --spec mtp -p 8 -n 16 -r 1 -t 1 --cache-type-k $t --cache-type-v $t >"$tmp/out" 2>&1 && has "outputs identical"'
  check "memory line: $t cache is $( [ $t = q8_0 ] && echo 34 || echo 18 )/64 of f16" \
    '"$NEXTN" run -m "$tmp/full.gguf" $R -c 8192 -ctk $t -ctv $t 2>"$tmp/out" >/dev/null && has "MiB ($t, n_ctx 8192" &&
     awk -v a="$(kvmib "$tmp/mem_f16.txt")" -v b="$(kvmib "$tmp/out")" -v r=$( [ $t = q8_0 ] && echo 34 || echo 18 ) "BEGIN { exit !(a > 0 && (b * 64 / a - r) ^ 2 < 0.01) }"'
done
check "-ctk q8_0 alone: k q8_0, v f16" \
  '"$NEXTN" run -m "$tmp/full.gguf" $R -ctk q8_0 2>"$tmp/out" >/dev/null && has "(k q8_0, v f16,"'
check "bad cache type: clear error" \
  '! "$NEXTN" run -m "$tmp/full.gguf" $R -ctv q5_1 >"$tmp/out" 2>&1 && has "--cache-type-v"'
check "bench --spec mtp" \
  '"$NEXTN" bench -m "$tmp/full.gguf" --spec mtp -p 8 -n 16 -r 1 -t 1 >"$tmp/out" 2>&1 && has "speedup" && has "outputs identical"'
# qwen35moe (tiny-moe): speculative == plain through the CLI, the MoE MTP block from the file, a
# sibling mtp-only file, the oracle and the server engine's path (bench --spec mtp)
"$NEXTN" mkmodel --preset tiny-moe --seed 3 -o "$tmp/moe.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel tiny-moe"; exit 1; }
mkdir "$tmp/moedir"
"$NEXTN" mkmodel --preset tiny-moe --seed 3 --no-mtp -o "$tmp/moedir/model.gguf" >/dev/null 2>&1 || exit 1
check "MoE: greedy spec == plain (spec-bench)" \
  '"$NEXTN" spec-bench -m "$tmp/moe.gguf" $B --seqs 2 --no-adaptive >"$tmp/out" 2>&1 && has "outputs identical"'
check "MoE: oracle acceptance 100%" \
  '"$NEXTN" spec-bench -m "$tmp/moe.gguf" $B --spec-oracle >"$tmp/out" 2>&1 && has "acceptance 100.0%"'
check "MoE: mtp-extract keeps the MoE MTP block, found as a sibling" \
  '"$NEXTN" mtp-extract "$tmp/moe.gguf" "$tmp/moedir/mtp-model.gguf" >"$tmp/out" 2>&1 && "$NEXTN" spec-bench -m "$tmp/moedir/model.gguf" $B >"$tmp/out" 2>&1 && has "MTP head from $tmp/moedir/mtp-model.gguf" && has "outputs identical"'
"$NEXTN" run -m "$tmp/moe.gguf" $R >"$tmp/plain.txt" 2>/dev/null
check "MoE: run --spec mtp == plain run (greedy ids)" \
  '"$NEXTN" run -m "$tmp/moe.gguf" $R --spec mtp --draft-max 3 >"$tmp/spec.txt" 2>"$tmp/out" && cmp -s "$tmp/plain.txt" "$tmp/spec.txt" && has "acceptance"'
check "MoE: bench reports the experts and the bytes a token reads" \
  '"$NEXTN" bench -m "$tmp/moe.gguf" -p 8 -n 8 -r 1 -t 1 >"$tmp/out" 2>&1 && has "mixture of experts: 2 of 8 experts per token, 19.1 MiB of weights read per token" && has "tg reads"'
check "MoE: bench --spec mtp" \
  '"$NEXTN" bench -m "$tmp/moe.gguf" --spec mtp -p 8 -n 16 -r 1 -t 1 >"$tmp/out" 2>&1 && has "outputs identical"'
exit $fail
