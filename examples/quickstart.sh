#!/usr/bin/env bash
# Quickstart, offline, on CPU (about 8 minutes on 2 cores):
#   synthetic corpus -> fairseq-syntax-preprocess (gold CoNLL-U trees, gold alignments)
#   -> fairseq-train the attentional RNN backbone for a fixed number of updates
#   -> fairseq-generate the test split and the generalisation split (gen: deeper nesting,
#      more attractors, longer sentences than any in training)
#   -> sacreBLEU of the detokenised text (with signature), agreement accuracy (all
#      sentences and long-distance ones).
# The budget is a number of updates, so the same command prints the same numbers on any
# machine. Usage: bash examples/quickstart.sh [WORK_DIR]   (default: ./quickstart)
set -euo pipefail

WORK=${1:-quickstart}
UPDATES=${QUICKSTART_UPDATES:-700}
USER_DIR=$(fairseq-syntax-user-dir)
mkdir -p "$WORK"

echo "== 1. synthetic corpus (20,000 / 500 / 500 pairs and 500 gen pairs, gold trees and alignments)"
fairseq-syntax-synthetic --out "$WORK/raw" --seed 1

echo "== 2. preprocess: sentencepiece, subword trees and alignments, fairseq binaries"
fairseq-syntax-preprocess --source-lang en --target-lang vf \
  --trainpref "$WORK/raw/train" --validpref "$WORK/raw/valid" \
  --testpref "$WORK/raw/test,$WORK/raw/gen" \
  --align-suffix align --vocab-size 1000 --destdir "$WORK/data-bin" --workers 2 --force

echo "== 3. train the backbone for $UPDATES updates"
fairseq-train "$WORK/data-bin" --user-dir "$USER_DIR" --task syntax_translation \
  --arch attentional_rnn --encoder-embed-dim 96 --encoder-hidden-size 128 \
  --decoder-embed-dim 96 --decoder-hidden-size 256 --dropout 0.1 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --optimizer adam --lr 0.003 --clip-norm 1.0 --max-tokens 3000 \
  --max-update "$UPDATES" --cpu --seed 1 --save-dir "$WORK/checkpoints" \
  --no-epoch-checkpoints --no-save-optimizer-state --log-interval 100 --no-progress-bar

# test: the in-distribution test split; test1: the generalisation split (gen.*)
for split in test:test gen:test1; do
  name=${split%%:*} subset=${split##*:}
  echo "== 4. decode $name with beam 5"
  fairseq-generate "$WORK/data-bin" --user-dir "$USER_DIR" --task syntax_translation \
    --path "$WORK/checkpoints/checkpoint_last.pt" --gen-subset "$subset" --beam 5 \
    --batch-size 128 --max-len-a 1.5 --max-len-b 10 --post-process sentencepiece --cpu \
    > "$WORK/generate.$name.out"
  grep '^D-' "$WORK/generate.$name.out" | sort -t- -k2 -n | cut -f3 > "$WORK/$name.hyp"
  echo "== 5. scores on $name"
  fairseq-syntax-score-agreement --hyp "$WORK/$name.hyp" --ref "$WORK/raw/$name.vf" \
    --src-conllu "$WORK/raw/$name.en.conllu" --bleu
done
