#!/usr/bin/env bash
# On the lent GPU machine: one device call of at most 10 minutes, whose results come back
# in $OUT (files carried by examples/device/carry.sh; see examples/device/README.md).
#
#   bash examples/device/call.sh readiness NAME [READINESS_OPTIONS...]
#       fairseq-syntax-gpu-readiness on .carry/NAME/data-bin, every architecture in fp32,
#       --fp16 and --bf16 (< 8 min) -> $OUT/readiness.md; options given replace the defaults
#   bash examples/device/call.sh experiment NAME EXPERIMENT_OPTIONS...
#       fairseq-syntax-experiment --gpu on .carry/NAME (the corpus preset from NAME's
#       prefix, kftt or multi30k), stopped 560 s into the call; the records of the runs that
#       finished (docs/results/CORPUS-gpu/) -> $OUT/results.tgz, to unpack here in the
#       checkout (`tar -xzf results.tgz`) and render with --gpu --render-only
set -euo pipefail
SECONDS=0  # the call's clock: the device stops a call at 600 s, so every bound below is left to it
cd "$(dirname "$0")/../.."
STEP=${1:-} NAME=${2:-}
if [ -z "$NAME" ] || { [ "$STEP" != readiness ] && [ "$STEP" != experiment ]; }; then
  echo "call.sh: usage: call.sh readiness|experiment NAME [OPTIONS...] (see its header)" >&2
  exit 2
fi
if [ ! -f ".carry/$NAME.tar.xz" ]; then
  echo "call.sh: .carry/$NAME.tar.xz must have travelled: here, carry.sh --dest DIR" \
       "(DIR named NAME), then run(carry=[\".whl\", \".carry\"], ...)" >&2
  exit 2
fi
[ -d ".carry/$NAME/data-bin" ] || tar -xJf ".carry/$NAME.tar.xz" -C .carry
shift 2
: "${OUT:?call.sh runs on the device, where \$OUT is the folder that comes back}"
source examples/device/setup.sh
case "$STEP" in
  readiness)
    timeout $((560 - SECONDS)) fairseq-syntax-gpu-readiness ".carry/$NAME/data-bin" --preset recipe \
      --steps 10 --time-budget 420 --out "$OUT/readiness.md" "$@" ;;
  experiment)
    case "$NAME" in kftt*) CORPUS=kftt ;; multi30k*) CORPUS=multi30k ;;
      *) echo "call.sh: NAME must start with kftt or multi30k (the corpus preset)" >&2; exit 2 ;;
    esac
    status=0
    timeout $((560 - SECONDS)) fairseq-syntax-experiment --corpus "$CORPUS" --data-bin ".carry/$NAME/data-bin" \
      --workdir /tmp/fairseq-syntax-work --gpu "$@" || status=$?
    tar -czf "$OUT/results.tgz" docs/results/*-gpu  # records only: tables are rendered here
    echo "call.sh: fairseq-syntax-experiment ended with $status (124: stopped at $SECONDS s of" \
         "the call; the runs it finished are in results.tgz)"
    ;;
esac
