#!/usr/bin/env bash
# test_quantize_imatrix.sh - `nextn quantize --imatrix`: whole output files byte-identical to
# llama-quantize --imatrix (sha256 of llama.cpp's outputs, tests/fixtures/README.md "quantize/"),
# for GGUF and legacy .dat importance matrices, dense and MoE (one row per expert), the imatrix
# type rules, and the errors.  The importance-matrix paths are relative to the source tree, as
# they were for llama-quantize: the path is stored in the output (quantize.imatrix.file).
. "$(dirname "$0")/lib.sh"
cd "$NEXTN_SRC" || exit 1
fx=tests/fixtures/quantize
sha() { sha256sum "$1" | cut -d" " -f1; }
"$NEXTN" mkmodel --preset tiny --type f16 -o "$tmp/tiny.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel tiny"; exit 1; }
"$NEXTN" mkmodel --preset tiny --type f16 --no-mtp -o "$tmp/nomtp.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel tiny --no-mtp"; exit 1; }
"$NEXTN" mkmodel --preset tiny-moe --type f16 -o "$tmp/moe.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel tiny-moe"; exit 1; }
# the inputs llama-quantize was given (a changed generator is reported as such, not as a quantiser bug)
check "input tiny-f16 is the one of the fixtures" '[ "$(sha "$tmp/tiny.gguf")" = 30e0dbceadd62077a2219dab2e47d489d8aba2c428649c2c0f27f0bbf02f5f38 ]'
check "input tiny --no-mtp is the one of the fixtures" '[ "$(sha "$tmp/nomtp.gguf")" = 29a0d691e9d469115dcc657dbba7cec47e28ab7e98159c91f3081fd6a5f5c28d ]'
check "input tiny-moe is the one of the fixtures" '[ "$(sha "$tmp/moe.gguf")" = 6906e0c6ebd9108e45264109e86db28e33c09b43171615123a1164111a596be6 ]'

# same IN IMATRIX TYPE SHA256 [extra flags...]: nextn's output has llama-quantize's hash
same() {
    local in=$1 im=$2 type=$3 want=$4; shift 4
    local out="$tmp/out-$RANDOM.gguf"
    "$NEXTN" quantize --imatrix "$im" "$@" "$in" "$out" "$type" -t 2 -q && [ "$(sha "$out")" = "$want" ]
    local rc=$?
    rm -f "$out"
    return $rc
}
T="$tmp/tiny.gguf" M="$tmp/moe.gguf" N="$tmp/nomtp.gguf" D=models/nextn-demo.gguf
check "tiny q4_k_m (GGUF imatrix)" 'same $T $fx/tiny.imatrix.gguf q4_k_m 5d546e9063b752898ca55142c3be02bd1311a76640a302f7bea4155008e6ded1'
check "tiny q6_k"                  'same $T $fx/tiny.imatrix.gguf q6_k   7a12a5166574d44e1c78e189a02221c45993211fa5af5b51409b1a6bc9c18695'
check "tiny q3_k_m"                'same $T $fx/tiny.imatrix.gguf q3_k_m 59602686c459d1d45f483470c280c05fb8c2efe011c251c1d37fa5d42dc503bb'
check "tiny q2_k"                  'same $T $fx/tiny.imatrix.gguf q2_k   27d5d68b45f0b10ba08bfd909e77ebf9b2ed2ca407c7104f5c5d8eeb97a611e6'
check "tiny iq4_xs"                'same $T $fx/tiny.imatrix.gguf iq4_xs 1538c6e144ef5d87f060973104534191451abbd98da9f15e429762006467c72f'
check "tiny q4_0 + q4_1/q5_1/q5_K/iq4_nl overrides" 'same $T $fx/tiny.imatrix.gguf q4_0 0866386fdcc0a612b27b9a301f89328b604446de98ac30daa30108ea4846d094 --tensor-type ffn_up=q4_1 --tensor-type ffn_gate=q5_1 --tensor-type attn_qkv=q5_k --tensor-type ssm_out=iq4_nl'
check "tiny q4_k_m (legacy .dat imatrix)" 'same $T $fx/tiny.imatrix.dat q4_k_m c18ca86b43dc6cdec3d167344c534f4163dd16a7bde36e058d01a58a44ec104e'
check "moe q4_k_m (per-expert rows)" 'same $M $fx/tiny-moe.imatrix.gguf q4_k_m 8b54fff69aec7f89e0165aa1ac4b494265b7a25328ba0a64145b75f7a1d9bf68'
check "moe q2_k"                   'same $M $fx/tiny-moe.imatrix.gguf q2_k   ec781a8df8a654da468168a24bdd558b0f5970870e7d4c8b5e23ba349fc4ef65'
# q2_k_s needs an importance matrix: refused without one, or when a Q2_K tensor has no entry
# (tiny's MTP block: llama-imatrix does not run it), as llama-quantize refuses both
check "tiny --no-mtp q2_k_s" 'same $N $fx/tiny.imatrix.gguf q2_k_s 21fc2863a3f4484e893027c0028e4b405e84d4e7aff139b8932abefdf946fd87'
check "q2_k_s without an imatrix is refused, naming the tensor" 'out=$("$NEXTN" quantize $N "$tmp/x.gguf" q2_k_s 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "tensor .blk\.0\.attn_gate\.weight.: type q2_K in a q2_k_s file needs an importance matrix" && [ ! -e "$tmp/x.gguf" ]'
check "q2_k_s with an entry missing is refused, naming file and tensor" 'out=$("$NEXTN" quantize --imatrix $fx/tiny.imatrix.gguf $T "$tmp/x.gguf" q2_k_s 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "tiny.imatrix.gguf: no importance data for tensor .blk\.6\.attn_k\.weight." && [ ! -e "$tmp/x.gguf" ]'
# the demo model (21 layers): with an imatrix, ffn_down of the first n/8 layers is q4_1 / q5_1 in
# q4_0 / q5_0 and stays in the base type in iq4_xs (q5_K, here its fallback q5_1, without)
check "demo q4_0 (ffn_down -> q4_1)" 'same $D $fx/demo.imatrix.gguf q4_0 7b4d6b3ad130b3b9068e5c382abb6c8f0606c1531e3e01e04e62b9f2c1ea0557'
check "demo q5_0 (ffn_down -> q5_1)" 'same $D $fx/demo.imatrix.gguf q5_0 b556e42aa0c38f1362986629d7aed8028e1dcbf32665452c3811fea0ea0d9123'
check "demo iq4_xs (ffn_down stays)" 'same $D $fx/demo.imatrix.gguf iq4_xs 470b0691e9ba522d78ee6d6f646bcf849b4846ba9e243be677b15bf549132e77'

# errors name the file and the tensor / field
check "missing imatrix file" 'out=$("$NEXTN" quantize --imatrix "$tmp/none.dat" $T "$tmp/x.gguf" q4_k_m 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "none.dat"'
check "a model file is not an imatrix (metadata missing)" 'out=$("$NEXTN" quantize --imatrix $D $T "$tmp/x.gguf" q4_k_m 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "nextn-demo.gguf: missing imatrix metadata"'
check "a text file is not an imatrix" 'printf "hello" >"$tmp/t.txt"; out=$("$NEXTN" quantize --imatrix "$tmp/t.txt" $T "$tmp/x.gguf" q4_k_m 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "t.txt"'
check "entry of the wrong size names file, tensor and sizes" 'out=$("$NEXTN" quantize --imatrix $fx/demo.imatrix.gguf $T "$tmp/x.gguf" q4_k_m 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "demo.imatrix.gguf: entry .blk\.0\.[a-z_]*\.weight. has 128 values, the tensor needs 256" && [ ! -e "$tmp/x.gguf" ]'
check "truncated legacy file" 'head -c 3000 $fx/tiny.imatrix.dat >"$tmp/cut.dat"; out=$("$NEXTN" quantize --imatrix "$tmp/cut.dat" $T "$tmp/x.gguf" q4_k_m 2>&1); [ $? -eq 1 ] && echo "$out" | grep -q "cut.dat: entry .*truncated"'
exit $fail
