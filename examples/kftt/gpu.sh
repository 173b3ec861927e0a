#!/usr/bin/env bash
# Whenever a GPU is lent: KFTT on the full data-bin that prepare.sh made, in calls that each
# fit in 10 minutes (the device's per-call limit), so that one step is one call:
#
#   bash examples/kftt/gpu.sh --step readiness   # fairseq-syntax-gpu-readiness, < 8 min
#   bash examples/kftt/gpu.sh --step train       # MINUTES of training, resumable; repeat
#   bash examples/kftt/gpu.sh --step decode      # test set, beam 5, BLEU ja-mecab/chrF/RIBES
#   bash examples/kftt/gpu.sh --step all         # the three, one after the other
#
#   --dest DIR     prepare.sh's folder (default data/kftt-en-ja): DIR/data-bin, DIR/tok, DIR/raw
#   --arch ARCH    architecture to train and decode (default attentional_rnn)
#   --minutes M    training minutes per train call (default 7: with start-up, loading the
#                  440k pairs, the last validation and checkpoint it stays under 10)
# Environment: PRECISION (fp32, fp16 or bf16: fairseq's --fp16/--bf16; default fp32, choose
# from the readiness table), MAX_UPDATE (0: no limit), MAX_TOKENS (4000), READINESS_ARGS
# (more fairseq-syntax-gpu-readiness options, e.g. "--steps 5 --archs tree2seq").
#
# Training is bounded by --stop-time-hours: fairseq counts it cumulatively across resumed
# runs (the checkpoint keeps previous_training_time), so each call reads the time already
# spent from checkpoint_last.pt and allows MINUTES more; --max-update bounds it too.
# Sizes are the readiness command's "recipe" preset: RNNs as examples/multi30k/train.sh,
# the Transformer family at _iwslt_de_en's (512, FFN 1024, 4 heads, 6 + 6 layers).
set -euo pipefail

DEST=data/kftt-en-ja
ARCH=attentional_rnn
STEP=""
MINUTES=7
while [ $# -gt 0 ]; do
  case "$1" in
    --dest) DEST=$2; shift 2 ;;
    --arch) ARCH=$2; shift 2 ;;
    --step) STEP=$2; shift 2 ;;
    --minutes) MINUTES=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$STEP" in
  readiness|train|decode|all) ;;
  *) echo "gpu.sh: --step readiness, train, decode or all is required (one call each)" >&2; exit 2 ;;
esac
BIN=$DEST/data-bin TOK=$DEST/tok RAW=$DEST/raw
if [ ! -f "$BIN/syntax_manifest.json" ]; then
  echo "gpu.sh: no data-bin in $BIN: run examples/kftt/prepare.sh --direction en-ja first" >&2
  exit 2
fi
TGT=$(python -c "import json,sys; print(json.load(open(sys.argv[1]))['target_lang'])" "$BIN/syntax_manifest.json")
PRECISION=${PRECISION:-fp32}
case "$PRECISION" in
  fp32) PREC_ARGS=() ;;
  fp16) PREC_ARGS=(--fp16) ;;
  bf16) PREC_ARGS=(--bf16) ;;
  *) echo "gpu.sh: PRECISION must be fp32, fp16 or bf16" >&2; exit 2 ;;
esac
MAX_UPDATE=${MAX_UPDATE:-0}
MAX_TOKENS=${MAX_TOKENS:-4000}
USER_DIR=$(fairseq-syntax-user-dir)
CKPT=$DEST/checkpoints/$ARCH-$PRECISION OUT=$DEST/results/$ARCH-$PRECISION
mkdir -p "$CKPT" "$OUT"

readiness() {
  echo "== readiness: every architecture, fp32/fp16/bf16, recipe sizes -> $DEST/readiness.md"
  # --time-budget: a precision that would overrun is skipped with a note, so the call ends
  # with a table; timeout is the hard bound of the call
  timeout 540 fairseq-syntax-gpu-readiness "$BIN" --preset recipe --steps 10 \
    --time-budget 420 --out "$DEST/readiness.md" ${READINESS_ARGS:-}
}

train() {
  local spent hours sizes
  spent=$(python - "$CKPT/checkpoint_last.pt" <<'EOF'
import os, sys
import torch
import fairseq_syntax  # noqa: F401  (torch's safe unpickler reads fairseq checkpoints)
path = sys.argv[1]
state = torch.load(path, map_location="cpu") if os.path.exists(path) else {}
print(float(state.get("extra_state", {}).get("previous_training_time", 0.0)))
EOF
)
  hours=$(python -c "import sys; print((float(sys.argv[1]) + 60 * float(sys.argv[2])) / 3600)" "$spent" "$MINUTES")
  case "$ARCH" in
    *transformer*) sizes=(--encoder-embed-dim 512 --encoder-ffn-embed-dim 1024 --encoder-layers 6
                          --encoder-attention-heads 4 --decoder-embed-dim 512 --decoder-ffn-embed-dim 1024
                          --decoder-layers 6 --decoder-attention-heads 4 --dropout 0.3) ;;
    *) sizes=(--encoder-embed-dim 256 --encoder-hidden-size 256 --decoder-embed-dim 256
              --decoder-hidden-size 512 --dropout 0.3) ;;
  esac
  echo "== train $ARCH ($PRECISION): ${spent}s already, up to $MINUTES min more (--stop-time-hours $hours)"
  fairseq-train "$BIN" --user-dir "$USER_DIR" --task syntax_translation --arch "$ARCH" "${sizes[@]}" \
    --criterion label_smoothed_cross_entropy --label-smoothing 0.1 \
    --optimizer adam --lr 0.001 --clip-norm 5.0 \
    --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --patience 4 \
    --max-tokens "$MAX_TOKENS" --max-update "$MAX_UPDATE" --stop-time-hours "$hours" \
    --validate-interval-updates 1000 --save-interval-updates 1000 --keep-interval-updates 1 \
    --seed 1 --num-workers 1 --save-dir "$CKPT" --no-epoch-checkpoints \
    --log-format json --log-interval 100 --no-progress-bar "${PREC_ARGS[@]}" \
    2>&1 | tee -a "$CKPT/train.log"
}

decode() {
  echo "== decode test (beam 5) with $CKPT/checkpoint_best.pt, score ($TGT)"
  fairseq-generate "$BIN" --user-dir "$USER_DIR" --task syntax_translation \
    --path "$CKPT/checkpoint_best.pt" --gen-subset test --beam 5 --batch-size 128 \
    --post-process sentencepiece "${PREC_ARGS[@]}" > "$OUT/generate.test.out"
  grep '^H-' "$OUT/generate.test.out" | sort -t- -k2 -n | cut -f3 > "$OUT/test.tok.$TGT"
  fairseq-syntax-tokenize detokenize --glue-table "$TOK/glue.$TGT.json" "$OUT/test.tok.$TGT" "$OUT/test.$TGT"
  python - "$OUT/test.$TGT" "$RAW/test.$TGT" "$TGT" "$OUT/test.tok.$TGT" "$TOK/test.$TGT" <<'EOF' | tee "$OUT/scores.json"
import html, json, sys
from fairseq_syntax.evaluation.translation_scores import bleu_tokenization, score_translations
hyps, raw, tgt, hyps_tok, refs_tok = sys.argv[1:6]
lines = lambda path: open(path, encoding="utf-8").read().splitlines()
refs = [html.unescape(line) for line in lines(raw)]  # KFTT's raw text keeps &apos; and the like
s = score_translations(lines(hyps), refs, bleu_tokenization(tgt), lines(hyps_tok), lines(refs_tok))
print(json.dumps({"bleu": s.bleu, "chrf": s.chrf, "ribes": s.ribes, "signatures": s.signatures}, indent=1))
EOF
}

case "$STEP" in
  readiness) readiness ;;
  train) train ;;
  decode) decode ;;
  all) readiness; train; decode ;;
esac
