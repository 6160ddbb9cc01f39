#!/usr/bin/env bash
# test_mkmodel.sh - `nextn mkmodel`: writes a loadable tiny model, is deterministic, rejects bad options.
. "$(dirname "$0")/lib.sh"
check "tiny q8_0 writes"        '"$NEXTN" mkmodel --preset tiny --type q8_0 --seed 4 -o "$tmp/a.gguf" 2>/dev/null'
check "same seed, same bytes"   '"$NEXTN" mkmodel --preset tiny --type q8_0 --seed 4 -t 1 -o "$tmp/b.gguf" 2>/dev/null && cmp -s "$tmp/a.gguf" "$tmp/b.gguf"'
check "info reads it as qwen35" '"$NEXTN" info "$tmp/a.gguf" | grep -q "qwen35.ssm.group_count"'
check "--no-mtp drops the block" '"$NEXTN" mkmodel --preset tiny --no-mtp --vocab 300 -o "$tmp/c.gguf" 2>/dev/null && ! "$NEXTN" info "$tmp/c.gguf" | grep -q "nextn_predict\|blk.6"'
check "unknown preset exits 1 naming it" 'out=$("$NEXTN" mkmodel --preset 70b -o "$tmp/x.gguf" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "70b"'
check "unknown type exits 2"    'out=$("$NEXTN" mkmodel --preset tiny --type q9_9 -o "$tmp/x.gguf" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "q9_9"'
check "missing -o exits 2"      '"$NEXTN" mkmodel --preset tiny >/dev/null 2>&1; [ $? -eq 2 ]'
check "vocab too small exits 1" 'out=$("$NEXTN" mkmodel --preset tiny --vocab 10 -o "$tmp/x.gguf" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "vocab"'
check "no partial file on error" '[ ! -e "$tmp/x.gguf" ]'
# qwen35moe presets: arch, expert keys, stacked or fused experts, info's MoE summary, --layers
check "tiny-moe writes qwen35moe" '"$NEXTN" mkmodel --preset tiny-moe --seed 4 -o "$tmp/m.gguf" 2>/dev/null && "$NEXTN" info "$tmp/m.gguf" >"$tmp/mi" && grep -q "general.architecture .*\"qwen35moe\"" "$tmp/mi" && grep -q "qwen35moe.expert_used_count  *uint32  *2" "$tmp/mi" && ! grep -q "qwen35moe.feed_forward_length" "$tmp/mi"'
check "stacked experts are 3-D" 'grep -E "blk.0.ffn_gate_exps.weight +f32 +\[256, 256, 8\]" "$tmp/mi" >/dev/null && grep -E "blk.0.ffn_gate_inp_shexp.weight +f32 +\[256\] " "$tmp/mi" >/dev/null'
check "info: experts and active share" 'grep -q "experts: 8 per layer, 2 routed per token + 1 shared; expert width 256, shared width 512" "$tmp/mi" && grep -q "routed experts  *6291456" "$tmp/mi" && grep -q "active per token (trunk): 5001104 of 9719696 parameters" "$tmp/mi"'
check "--fuse-gate-up-exps" '"$NEXTN" mkmodel --preset tiny-moe --fuse-gate-up-exps -o "$tmp/f.gguf" 2>/dev/null && "$NEXTN" info "$tmp/f.gguf" | grep -E "blk.4.ffn_gate_up_exps.weight +f32 +\[256, 512, 8\]" >/dev/null'
check "--fuse-gate-up-exps on a dense preset exits 1" 'out=$("$NEXTN" mkmodel --preset tiny --fuse-gate-up-exps -o "$tmp/x.gguf" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "dense"'
check "--layers cuts the trunk" '"$NEXTN" mkmodel --preset tiny --layers 3 --no-mtp -o "$tmp/l.gguf" 2>/dev/null && "$NEXTN" info "$tmp/l.gguf" | grep -q "qwen35.block_count  *uint32  *3"'
check "--layers below the full-attention period exits 1 at once, nothing written" \
  'out=$("$NEXTN" mkmodel --preset 0.8b --layers 2 -o "$tmp/x.gguf" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q -- "--layers 2: preset .0.8b. has a full-attention layer every 4 layers" && [ ! -e "$tmp/x.gguf" ]'
check "--layers above the preset exits 1" 'out=$("$NEXTN" mkmodel --preset tiny-moe --layers 9 -o "$tmp/x.gguf" 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "layers 9"'
exit $fail
