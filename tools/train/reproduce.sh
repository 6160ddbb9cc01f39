#!/usr/bin/env bash
# reproduce.sh [WORK_DIR] - the whole pipeline that produced models/nextn-demo.gguf.
# Needs: scripts/deps.sh --python; apt-get install bible-kjv bible-kjv-text python3-regex man-db;
# a built nextn (make build).  WORK_DIR (default /work/train-ckpt) stays outside git.
# Every step is deterministic; training resumes from WORK_DIR/run*/ckpt.pt when run again.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
w=${1:-/work/train-ckpt}
py=/usr/bin/python3            # Debian's python3 (python3-torch lives there)
mkdir -p "$w"
$py "$src/tools/train/corpus.py" "$w/corpus"                                   # 6.1 MB train, 0.31 MB held-out
$py "$src/tools/train/bpe.py" train "$w/corpus/train.txt" "$w/tok" --vocab 4096
$py "$src/tools/train/prepare.py" "$w/corpus" "$w/tok" "$w/data"              # 1.71 M / 87.9 k tokens
# stage 1: the 4-layer 1.63 M-parameter model, 905 steps, constant lr to 605, decayed to 10 % at 905
nice -n 5 $py "$src/tools/train/train.py" --data "$w/data" --out "$w/run1" --steps 905 --decay-start 605 --eval-windows 48
# stage 2: from stage 1's final checkpoint, lr back to 2e-3 until 1100, decayed to 10 % at 1350
mkdir -p "$w/run2"
[ -f "$w/run2/ckpt.pt" ] || cp "$w/run1/ckpt.pt" "$w/run1/log.jsonl" "$w/run2/"
$py "$src/tools/train/train.py" --data "$w/data" --out "$w/run2" --steps 1350 --decay-start 1100 --eval-windows 48 --eval-every 300
# stage 3: grown to 20 layers (5.07 M parameters; layers 4-19 start as zero-output copies, the same
# function), fresh optimiser, other windows (seed 3), lr 1.5e-3 constant to 450, linear decay towards
# 1.5e-4 at 750, stopped after step 700.  (Executed in two resumed pieces: steps 1-450 with
# --steps 100000 --decay-start 100000 --time-limit, then this command; same lr at every step.)
$py "$src/tools/train/grow.py" "$w/run2/ckpt.pt" "$w/grown-l20.pt" --layers 20
shape="--hidden 128 --ffn 384 --layers 20 --heads 4 --kv-heads 2 --head-dim 32 --lin-k-heads 2 --lin-v-heads 4 --lin-k-dim 32 --lin-v-dim 32"
run="$w/run3-grow20"
nice -n 2 $py "$src/tools/train/train.py" --data "$w/data" --out "$run" --init "$w/grown-l20.pt" --seed 3 --lr 1.5e-3 \
    --steps 750 --decay-start 450 --stop-at 700 --eval-windows 48 --eval-every 200 $shape
# stage 4: from stage 3's parameters, fresh optimiser, other windows (seed 4), MTP loss weight 1.0,
# lr 1e-3 constant to 450, linear decay to 1e-4 at 760.  (Executed in two resumed pieces: steps
# 1-150 with --steps 2000 --decay-start 1000, then this command; same lr at every step.)
prev="$run"; run="$w/run4"
$py "$src/tools/train/train.py" --data "$w/data" --out "$run" --init "$prev/ckpt.pt" --seed 4 --lr 1e-3 --warmup 30 \
    --steps 760 --decay-start 450 --mtp-weight 1.0 --eval-windows 48 --eval-every 200 $shape
# stage 5: from stage 4's parameters, fresh optimiser, seed 5, lr 6e-4 constant to 300, decayed to
# 6e-5 at 700, MTP weight 1.0
prev="$run"; run="$w/run5"
$py "$src/tools/train/train.py" --data "$w/data" --out "$run" --init "$prev/ckpt.pt" --seed 5 --lr 6e-4 --warmup 20 \
    --steps 700 --decay-start 300 --mtp-weight 1.0 --eval-windows 48 --eval-every 200 $shape
# stage 6: trunk frozen; only the MTP block learns, on the trunk's own distribution (--distill,
# docs/train.md "Draft distillation"): what a greedy verifier accepts
prev="$run"; run="$w/run6d"
$py "$src/tools/train/train.py" --data "$w/data" --out "$run" --init "$prev/ckpt.pt" --seed 6 --lr 1e-3 --warmup 20 \
    --steps 2400 --decay-start 1600 --distill --distill-chain 3 --eval-windows 48 --eval-every 400 $shape
$py "$src/tools/train/evaluate.py" "$run/ckpt.pt" "$w/data" | tee "$run/final-eval.json"
$py "$src/tools/train/export.py" "$run/ckpt.pt" "$w/tok" "$run/hf"
"$src/build/nextn" convert "$run/hf" -o "$src/models/nextn-demo.gguf" --type f32 --name nextn-demo --force
$py "$src/tools/train/fixtures.py" "$run/hf" "$w/data" "$src/tests/fixtures/demo-model" --greedy-len 16
