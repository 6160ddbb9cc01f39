#!/usr/bin/env bash
# test_convert_cli.sh - `nextn convert` from the command line: outputs, --force, --mtp naming, and
# clear errors (exit 1, message naming the file/key) for broken checkpoints.
. "$(dirname "$0")/lib.sh"
A="$NEXTN_SRC/tests/fixtures/hf-qwen35-a"
B="$NEXTN_SRC/tests/fixtures/hf-qwen35-b"
MA="$NEXTN_SRC/tests/fixtures/hf-qwen35moe-a"
MB="$NEXTN_SRC/tests/fixtures/hf-qwen35moe-b"

check "converts; no progress line in a pipe" '"$NEXTN" convert "$A" -o "$tmp/a.gguf" 2>"$tmp/log" && [ -s "$tmp/a.gguf" ] && grep -q "wrote" "$tmp/log" && ! grep -q "MB/s" "$tmp/log"'
check "progress on a terminal: tensor i/N, MB/s, ETA" \
  'script -qec "\"$NEXTN\" convert \"$A\" -o \"$tmp/a2.gguf\"" "$tmp/pty.log" </dev/null >/dev/null && grep -qa "tensor [0-9]*/[0-9]* .*MB/s  ETA" "$tmp/pty.log" && cmp -s "$tmp/a.gguf" "$tmp/a2.gguf"'
check "refuses to overwrite"           'out=$("$NEXTN" convert "$A" -o "$tmp/a.gguf" -q 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "exists (use --force"'
check "--force overwrites"             '"$NEXTN" convert "$A" -o "$tmp/a.gguf" --force -q'
check "--mtp writes mtp-<name>.gguf"   '"$NEXTN" convert "$A" -o "$tmp/m.gguf" --mtp -q && [ -s "$tmp/mtp-m.gguf" ] && [ ! -e "$tmp/m.gguf" ]'
check "sharded f16 -> q8_0"            '"$NEXTN" convert "$B" -o "$tmp/b.gguf" --type q8_0 -q && "$NEXTN" info "$tmp/b.gguf" | grep -q "q8_0"'
check "--mtp with --no-mtp is a usage error" '"$NEXTN" convert "$A" -o "$tmp/x.gguf" --mtp --no-mtp 2>/dev/null; [ $? -eq 2 ]'
check "bad --type is a usage error"    'out=$("$NEXTN" convert "$A" -o "$tmp/x.gguf" --type q4_0 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "q4_0"'
check "-o DIR is a usage error"        'mkdir -p "$tmp/d"; out=$("$NEXTN" convert "$A" -o "$tmp/d" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "is a directory"'
check "missing HF_DIR is a usage error" '"$NEXTN" convert -o "$tmp/x.gguf" 2>/dev/null; [ $? -eq 2 ]'

# broken copies of the fixtures
bad() { rm -rf "$tmp/bad"; cp -r "$1" "$tmp/bad"; }
expect_err() { # description, expected message part
  out=$("$NEXTN" convert "$tmp/bad" -o "$tmp/bad.gguf" --force -q 2>&1); rc=$?
  if [ $rc -eq 1 ] && echo "$out" | grep -qF -- "$2" && [ ! -e "$tmp/bad.gguf" ]; then echo "ok: $1"
  else echo "FAIL: $1 (rc=$rc, output: $out)"; fail=1; fi
}
bad "$B"; rm "$tmp/bad/model-00002-of-00003.safetensors"
expect_err "missing shard" "missing shard 'model-00002-of-00003.safetensors'"
bad "$A"; perl -0777 -pi -e 's/"dtype":"BF16"/"dtype":"XF16"/' "$tmp/bad/model.safetensors"
expect_err "unknown dtype" "unknown dtype 'XF16'"
bad "$A"; head -c 100 "$A/model.safetensors" > "$tmp/bad/model.safetensors"
expect_err "truncated safetensors header" "truncated header"
bad "$A"; grep -v '"hidden_size"' "$A/config.json" > "$tmp/bad/config.json"
expect_err "missing config key" "missing required key 'hidden_size'"
bad "$A"; sed 's/"intermediate_size": 128/"intermediate_size": 96/' "$A/config.json" > "$tmp/bad/config.json"
expect_err "shape disagrees with config" "config.json implies"
bad "$A"; sed 's/"Qwen3_5ForCausalLM"/"LlamaForCausalLM"/' "$A/config.json" > "$tmp/bad/config.json"
expect_err "unsupported architecture" "architecture 'LlamaForCausalLM' is not supported"
bad "$B"; sed 's/"tie_word_embeddings": true/"tie_word_embeddings": false/' "$B/config.json" > "$tmp/bad/config.json"
expect_err "untied config without lm_head" "checkpoint lacks the tensor for 'output.weight'"
bad "$A"; rm "$tmp/bad/tokenizer.json"
expect_err "missing tokenizer.json" "tokenizer.json"
bad "$A"; echo '{"architectures": ["Qwen3_5ForCausalLM"], ' > "$tmp/bad/config.json"
expect_err "config.json not JSON" "config.json: not a valid JSON object"

# MoE (qwen35moe)
check "MoE per-expert -> qwen35moe"    '"$NEXTN" convert "$MA" -o "$tmp/ma.gguf" -q && "$NEXTN" info "$tmp/ma.gguf" 2>&1 | grep -q "qwen35moe"'
check "MoE fused, --fuse-gate-up-exps" '"$NEXTN" convert "$MB" -o "$tmp/mb.gguf" --fuse-gate-up-exps -q && [ -s "$tmp/mb.gguf" ]'
check "--fuse-gate-up-exps on a dense checkpoint is an error" \
  'out=$("$NEXTN" convert "$A" -o "$tmp/x.gguf" --fuse-gate-up-exps -q 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "mixture-of-experts checkpoints"'
bad "$MA"; grep -v '"num_experts"' "$MA/config.json" > "$tmp/bad/config.json"
expect_err "MoE config without num_experts" "missing required key 'num_experts'"
bad "$MA"; sed 's/"num_experts_per_tok": 2/"num_experts_per_tok": 9/' "$MA/config.json" > "$tmp/bad/config.json"
expect_err "more experts per token than experts" "num_experts_per_tok 9 is not in 1..num_experts (8)"
bad "$MA"; sed 's/"num_experts": 8/"num_experts": 4/' "$MA/config.json" > "$tmp/bad/config.json"
expect_err "experts beyond num_experts" "expert 4, but num_experts is 4"
bad "$MA"; sed 's/"moe_intermediate_size": 32/"moe_intermediate_size": 16/' "$MA/config.json" > "$tmp/bad/config.json"
expect_err "expert shape disagrees with moe_intermediate_size" "has shape [64, 32] but config.json implies [64, 16]"
bad "$MA"; sed 's/"num_experts": 8,/"num_experts": 8, "norm_topk_prob": false,/' "$MA/config.json" > "$tmp/bad/config.json"
expect_err "norm_topk_prob false is refused" "norm_topk_prob false is not supported"
bad "$MA"; sed 's/"Qwen3_5MoeForCausalLM"/"Qwen3_5ForCausalLM"/; s/"num_experts": 8,/"num_experts": 8, "intermediate_size": 128,/' \
  "$MA/config.json" > "$tmp/bad/config.json"
expect_err "MoE tensors under a dense config" "belongs to a mixture-of-experts FFN, but config.json describes a dense model"
bad "$MA"; perl -0777 -pi -e 's/"model\.layers\.0\.mlp\.experts\.7\.up_proj\.weight"/"audio\.layers\.0\.mlp\.experts\.7\.up_proj\.weight"/' "$tmp/bad/model.safetensors"
expect_err "an expert tensor missing" "layer 0 has 23 of the 24 per-expert tensors; missing mlp.experts.7.up_proj.weight"
bad "$MA"; perl -0777 -pi -e 's/"model\.layers\.2\.mlp\.experts\.7\.up_proj\.weight"/"model\.layers\.2\.mlp\.experts\.9\.up_proj\.weight"/' "$tmp/bad/model.safetensors"
expect_err "expert index beyond num_experts" "expert 9, but num_experts is 8"
exit $fail
