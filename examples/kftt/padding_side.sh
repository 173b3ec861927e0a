#!/usr/bin/env bash
# Is the Transformer backbone fairseq's own `transformer` in training, dropout included?
# Trains, from one seed and for UPDATES updates, the three runs below with the training
# command of the KFTT records (docs/results/kftt-en-ja/*.seed1.json: recipe, batches,
# schedule), logging the training loss of every update:
#   backbone       --task syntax_translation --arch syntax_transformer (right-padded source)
#   fairseq-left   --task translation --arch transformer (fairseq's default: left-padded)
#   fairseq-right  the same with --left-pad-source (a switch: it turns left padding off)
# and prints each run's losses and which runs have the same ones.
#
#   bash examples/kftt/padding_side.sh DATA_BIN [UPDATES] [SEED] [FAIRSEQ-TRAIN ARGS...]
#
# DATA_BIN: the data-bin of `examples/kftt/prepare.sh --direction en-ja`. UPDATES (default
# 40), SEED (default 1); further arguments go to all three runs after the record's (e.g.
# `--dropout 0 --attention-dropout 0`). The three run side by side, one thread each; work
# files in a temporary folder.
set -euo pipefail
DATA_BIN=${1:?usage: padding_side.sh DATA_BIN [UPDATES] [SEED] [FAIRSEQ-TRAIN ARGS...]}
UPDATES=${2:-40}
SEED=${3:-1}
EXTRA=""
if [ $# -gt 3 ]; then EXTRA=$(printf ' %q' "${@:4}"); fi
HERE=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

command_of() {  # the record's training command for METHOD $1, cut to UPDATES updates, unsaved
  python - "$HERE/docs/results/kftt-en-ja/$1.seed1.json" "$UPDATES" "$SEED" "$OUT" \
    "$DATA_BIN" "$(fairseq-syntax-user-dir 2>/dev/null)" <<'PY'
import json, shlex, sys
record, updates, seed, save, data_bin, user_dir = sys.argv[1:]
command = json.load(open(record))["commands"]["train"]
command = command.replace("$DATA_BIN", data_bin).replace("$(fairseq-syntax-user-dir)", user_dir)
argv = shlex.split(command)[1:]
drop = {"--save-dir": 1, "--log-file": 1, "--log-interval": 1, "--max-update": 1,
        "--seed": 1, "--no-epoch-checkpoints": 0}
out, i = [], 0
while i < len(argv):
    if argv[i] in drop:
        i += 1 + drop[argv[i]]
        continue
    out.append(argv[i])
    i += 1
out += ["--max-update", updates, "--seed", seed, "--log-interval", "1", "--no-save",
        "--save-dir", save]  # fairseq makes the folder even with --no-save
print(" ".join(shlex.quote(a) for a in out))
PY
}

BACKBONE="$(command_of syntax_transformer)$EXTRA"
FAIRSEQ="$(command_of fairseq_transformer)$EXTRA"
FAIRSEQ_RIGHT="$(command_of fairseq_transformer) --left-pad-source$EXTRA"
eval "fairseq-train $BACKBONE" > "$OUT/backbone.log" 2>&1 &
eval "fairseq-train $FAIRSEQ" > "$OUT/fairseq-left.log" 2>&1 &
eval "fairseq-train $FAIRSEQ_RIGHT" > "$OUT/fairseq-right.log" 2>&1 &
wait

for run in backbone fairseq-left fairseq-right; do
  grep -o '"loss": "[0-9.]*", "nll_loss"' "$OUT/$run.log" | cut -d'"' -f4 | tr '\n' ' ' \
    > "$OUT/$run.losses"
  [ -s "$OUT/$run.losses" ] || { echo "error: $run logged no loss:"; tail -5 "$OUT/$run.log"; exit 1; }
  echo "$run: $(cat "$OUT/$run.losses")"
done
for other in fairseq-left fairseq-right; do
  if cmp -s "$OUT/backbone.losses" "$OUT/$other.losses"; then
    echo "backbone = $other: the same loss at every update"
  else
    echo "backbone differs from $other"
  fi
done
