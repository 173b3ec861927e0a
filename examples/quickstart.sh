#!/usr/bin/env bash
# Quickstart, offline, on CPU (about 7 minutes of wall time on 2 idle cores):
#   synthetic corpus -> fairseq-syntax-preprocess (gold CoNLL-U trees, gold alignments)
#   -> fairseq-train the attentional RNN backbone and the same model under supervised
#      attention (Mi et al. 2016), side by side, one thread each, for a fixed number of
#      updates
#   -> fairseq-generate the test split and the generalisation split (gen: deeper nesting,
#      more attractors, longer sentences than any in training) with both models
#   -> sacreBLEU of the detokenised text (with signature) and agreement accuracy (all
#      sentences and long-distance ones), one block per model and split; supervised
#      attention's blocks end with its difference from the backbone (paired bootstrap).
# The budget is a number of updates and every process runs one thread, so the same command
# prints the same numbers on every run on one CPU model; another CPU model (MKL and oneDNN
# pick their kernels by CPU) trains other digits (README, "Quickstart").
# Usage: bash examples/quickstart.sh [WORK_DIR]   (default: ./quickstart)
set -euo pipefail

WORK=${1:-quickstart}
UPDATES=${QUICKSTART_UPDATES:-700}
USER_DIR=$(fairseq-syntax-user-dir)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
mkdir -p "$WORK"

echo "== 1. synthetic corpus (20,000 / 500 / 500 pairs and 500 gen pairs, gold trees and alignments)"
fairseq-syntax-synthetic --out "$WORK/raw" --seed 1

echo "== 2. preprocess: sentencepiece, subword trees and alignments, fairseq binaries"
fairseq-syntax-preprocess --source-lang en --target-lang vf \
  --trainpref "$WORK/raw/train" --validpref "$WORK/raw/valid" \
  --testpref "$WORK/raw/test,$WORK/raw/gen" \
  --align-suffix align --vocab-size 1000 --destdir "$WORK/data-bin" --workers 2 --force

echo "== 3. train the backbone and supervised attention side by side, $UPDATES updates each"
declare -A CRITERION=([backbone]=label_smoothed_cross_entropy
                      [supervised]=supervised_attention_cross_entropy)
for model in backbone supervised; do
  fairseq-train "$WORK/data-bin" --user-dir "$USER_DIR" --task syntax_translation \
    --arch attentional_rnn --encoder-embed-dim 96 --encoder-hidden-size 128 \
    --decoder-embed-dim 96 --decoder-hidden-size 256 --dropout 0.1 \
    --criterion "${CRITERION[$model]}" --label-smoothing 0.1 \
    --optimizer adam --lr 0.003 --clip-norm 1.0 --max-tokens 3000 --num-workers 0 \
    --max-update "$UPDATES" --cpu --seed 1 --save-dir "$WORK/checkpoints/$model" \
    --no-epoch-checkpoints --no-save-optimizer-state --log-interval 100 --no-progress-bar \
    > "$WORK/train.$model.log" 2>&1 &
done
wait -n && wait -n || { echo "training failed: see $WORK/train.*.log" >&2; exit 1; }

# test: the in-distribution test split; test1: the generalisation split (gen.*)
for model in backbone supervised; do
  for split in test:test gen:test1; do
    name=${split%%:*} subset=${split##*:}
    fairseq-generate "$WORK/data-bin" --user-dir "$USER_DIR" --task syntax_translation \
      --path "$WORK/checkpoints/$model/checkpoint_last.pt" --gen-subset "$subset" --beam 5 \
      --batch-size 128 --max-len-a 1.5 --max-len-b 10 --post-process sentencepiece --cpu \
      > "$WORK/generate.$model.$name.out" 2> /dev/null
    grep '^D-' "$WORK/generate.$model.$name.out" | sort -t- -k2 -n | cut -f3 > "$WORK/$model.$name.hyp"
    # supervised attention is also tested against the backbone on the same sentences
    against_backbone=()
    [ "$model" = supervised ] && against_backbone=(--baseline "$WORK/backbone.$name.hyp")
    echo "== 4. $model on $name"
    fairseq-syntax-score-agreement --hyp "$WORK/$model.$name.hyp" --ref "$WORK/raw/$name.vf" \
      --src-conllu "$WORK/raw/$name.en.conllu" --bleu "${against_backbone[@]}"
  done
done
