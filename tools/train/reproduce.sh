#!/usr/bin/env bash
# reproduce.sh [WORK_DIR] - the whole pipeline that produced models/nextn-demo.gguf.
# Needs: scripts/deps.sh --python; apt-get install bible-kjv bible-kjv-text python3-regex man-db;
# a built nextn (make build).  WORK_DIR (default /work/train-ckpt) stays outside git.
# Every step is deterministic; training resumes from WORK_DIR/run1/ckpt.pt when run again.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
w=${1:-/work/train-ckpt}
py=/usr/bin/python3            # Debian's python3 (python3-torch lives there)
mkdir -p "$w"
$py "$src/tools/train/corpus.py" "$w/corpus"                                   # 6.1 MB train, 0.31 MB held-out
$py "$src/tools/train/bpe.py" train "$w/corpus/train.txt" "$w/tok" --vocab 4096
$py "$src/tools/train/prepare.py" "$w/corpus" "$w/tok" "$w/data"              # 1.71 M / 87.9 k tokens
# stage 1: 905 steps, constant lr to 605, decayed to 10 % at 905
nice -n 5 $py "$src/tools/train/train.py" --data "$w/data" --out "$w/run1" --steps 905 --decay-start 605 --eval-windows 48
# stage 2 (more time became available): from stage 1's final checkpoint, lr back to 2e-3 until 1100,
# decayed to 10 % at 1350
mkdir -p "$w/run2"
[ -f "$w/run2/ckpt.pt" ] || cp "$w/run1/ckpt.pt" "$w/run1/log.jsonl" "$w/run2/"
$py "$src/tools/train/train.py" --data "$w/data" --out "$w/run2" --steps 1350 --decay-start 1100 --eval-windows 48 --eval-every 300
$py "$src/tools/train/evaluate.py" "$w/run2/ckpt.pt" "$w/data" | tee "$w/run2/final-eval.json"
$py "$src/tools/train/export.py" "$w/run2/ckpt.pt" "$w/tok" "$w/hf"
"$src/build/nextn" convert "$w/hf" -o "$src/models/nextn-demo.gguf" --type f32 --name nextn-demo --force
$py "$src/tools/train/fixtures.py" "$w/hf" "$w/data" "$src/tests/fixtures/demo-model" --greedy-len 16
