#!/usr/bin/env bash
# Quickstart, offline, on CPU (under 10 minutes on 2 cores):
#   synthetic corpus -> fairseq-syntax-preprocess (gold CoNLL-U trees, gold alignments)
#   -> fairseq-train the attentional RNN backbone for a few minutes
#   -> fairseq-generate the test split -> sacreBLEU (with signature) and agreement accuracy.
# Usage: bash examples/quickstart.sh [WORK_DIR]   (default: ./quickstart)
set -euo pipefail

WORK=${1:-quickstart}
UPDATES=${QUICKSTART_UPDATES:-4000}
MINUTES=${QUICKSTART_TRAIN_MINUTES:-4}   # training stops after this many minutes (or UPDATES)
USER_DIR=$(fairseq-syntax-user-dir)
mkdir -p "$WORK"

echo "== 1. synthetic corpus (20,000 / 500 / 500 pairs, gold trees and alignments)"
fairseq-syntax-synthetic --out "$WORK/raw" --seed 1

echo "== 2. preprocess: sentencepiece, subword trees and alignments, fairseq binaries"
fairseq-syntax-preprocess --source-lang en --target-lang vf \
  --trainpref "$WORK/raw/train" --validpref "$WORK/raw/valid" --testpref "$WORK/raw/test" \
  --align-suffix align --vocab-size 1000 --destdir "$WORK/data-bin" --workers 2 --force

echo "== 3. train the backbone for $MINUTES minutes (at most $UPDATES updates)"
fairseq-train "$WORK/data-bin" --user-dir "$USER_DIR" --task syntax_translation \
  --arch attentional_rnn --encoder-embed-dim 96 --encoder-hidden-size 128 \
  --decoder-embed-dim 96 --decoder-hidden-size 256 --dropout 0.1 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --optimizer adam --lr 0.003 --clip-norm 1.0 --max-tokens 3000 \
  --max-update "$UPDATES" --stop-time-hours "$(python -c "print($MINUTES / 60)")" --cpu --seed 1 --save-dir "$WORK/checkpoints" \
  --no-epoch-checkpoints --log-interval 100 --no-progress-bar

echo "== 4. decode the test split with beam 5"
fairseq-generate "$WORK/data-bin" --user-dir "$USER_DIR" --task syntax_translation \
  --path "$WORK/checkpoints/checkpoint_last.pt" --gen-subset test --beam 5 \
  --batch-size 128 --max-len-a 1.5 --max-len-b 10 --post-process sentencepiece --cpu > "$WORK/generate.out"
grep '^D-' "$WORK/generate.out" | sort -t- -k2 -n | cut -f3 > "$WORK/test.hyp"
grep '^T-' "$WORK/generate.out" | sort -t- -k2 -n | cut -f2 > "$WORK/test.ref"

echo "== 5. scores"
sacrebleu "$WORK/test.ref" -i "$WORK/test.hyp" -m bleu -f text
fairseq-syntax-score-agreement --hyp "$WORK/test.hyp" --ref "$WORK/test.ref"
