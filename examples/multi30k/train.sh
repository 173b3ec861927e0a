#!/usr/bin/env bash
# Train the attentional RNN backbone on the Multi30k data-bin made by prepare.sh, decode
# test_2016_flickr with beam 5, detokenise, and score with sacreBLEU (signature printed).
#
#   bash examples/multi30k/train.sh [--dest DIR] [--arch ARCH] [-- EXTRA fairseq-train ARGS]
#
# Sizes (README.md): embeddings 256, BiLSTM encoder 2 x 256, decoder LSTM 512, dropout
# 0.3, Adam 1e-3 halved on a validation plateau, 4000 tokens per batch, at most
# MAX_EPOCH (default 12) epochs, CPU. Environment: MAX_EPOCH, MAX_UPDATE (0: no limit),
# BEAM (5), GEN_ARGS (more fairseq-generate options). Any --arch registered by the plugin
# works (syntax-aware ones read the parses already in the data-bin).
set -euo pipefail

DEST=data/multi30k
ARCH=attentional_rnn
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --dest) DEST=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "train.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
MAX_EPOCH=${MAX_EPOCH:-12}
MAX_UPDATE=${MAX_UPDATE:-0}
BEAM=${BEAM:-5}
GEN_ARGS=(${GEN_ARGS:-})
BIN=$DEST/data-bin TOK=$DEST/tok RAW=$DEST/raw
CKPT=$DEST/checkpoints/$ARCH OUT=$DEST/results/$ARCH
USER_DIR=$(fairseq-syntax-user-dir)
mkdir -p "$CKPT" "$OUT"

echo "== 1. train $ARCH"
fairseq-train "$BIN" --user-dir "$USER_DIR" --task syntax_translation --arch "$ARCH" \
  --encoder-embed-dim 256 --encoder-hidden-size 256 --encoder-layers 1 \
  --decoder-embed-dim 256 --decoder-hidden-size 512 --decoder-layers 1 --dropout 0.3 \
  --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
  --optimizer adam --lr 0.001 --clip-norm 5.0 \
  --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --patience 4 \
  --max-tokens 4000 --max-epoch "$MAX_EPOCH" --max-update "$MAX_UPDATE" \
  --cpu --seed 1 --num-workers 0 --save-dir "$CKPT" --no-epoch-checkpoints \
  --log-interval 100 --no-progress-bar "${EXTRA[@]}"

echo "== 2. decode test_2016_flickr (beam $BEAM)"
fairseq-generate "$BIN" --user-dir "$USER_DIR" --task syntax_translation \
  --path "$CKPT/checkpoint_best.pt" --gen-subset test --beam "$BEAM" --batch-size 64 \
  --post-process sentencepiece --cpu "${GEN_ARGS[@]}" > "$OUT/generate.test.out"
# H- lines hold spaCy tokens (sentencepiece undone); put them in input order
grep '^H-' "$OUT/generate.test.out" | sort -t- -k2 -n | cut -f3 > "$OUT/test.tok.de"

echo "== 3. detokenise (the tokenizer's own spacing, learned on train.de) and score"
fairseq-syntax-tokenize detokenize --glue-table "$TOK/glue.de.json" \
  "$OUT/test.tok.de" "$OUT/test.de"
sacrebleu "$RAW/test_2016_flickr.de" -i "$OUT/test.de" -m bleu -w 2 | tee "$OUT/bleu.json"
