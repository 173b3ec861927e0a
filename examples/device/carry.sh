#!/usr/bin/env bash
# Here, before a device call: put in .whl/ the Python 3.12 wheels that the lent GPU
# machine's image lacks (it has torch, numpy, sentencepiece, sacrebleu, networkx,
# matplotlib, tqdm; nothing can be fetched there), pinned to the versions this project is
# tested with, and in .carry/NAME a recipe's folder (prepare.sh's --dest): its data-bin and
# its test sets' references, what fairseq-syntax-experiment and -gpu-readiness read. Both
# folders are ignored by git; a device call names them in `carry` (64 MiB in all with the
# checkout) and runs examples/device/call.sh (see examples/device/README.md):
#
#   bash examples/device/carry.sh [--ja] [--dest DIR]
#
#   --ja        also MeCab + IPAdic (sacreBLEU's ja-mecab, to score Japanese there; 14 MB)
#   --dest DIR  a recipe's folder, carried as .carry/$(basename DIR).tar.xz (the
#               20,000-pair KFTT one: 4 MB)
set -euo pipefail
JA=0 DEST=""
while [ $# -gt 0 ]; do
  case "$1" in
    --ja) JA=1; shift ;;
    --dest) DEST=${2%/}; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "carry.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$DEST" ] && [ ! -f "$DEST/data-bin/syntax_manifest.json" ]; then
  echo "carry.sh: $DEST/data-bin has no syntax_manifest.json: give prepare.sh's --dest" >&2
  exit 2
fi
[ -z "$DEST" ] || DEST=$(cd "$DEST" && pwd)
cd "$(dirname "$0")/../.."
BINARY=(fairseq-fixed==0.12.3.1 hydra-core==1.3.2 omegaconf==2.3.0 bitarray==3.12.3
        conllu==6.0.0)
SOURCE=(antlr4-python3-runtime==4.9.3)  # published as a source archive only: built here
if [ "$JA" = 1 ]; then BINARY+=(mecab-python3==1.0.12); SOURCE+=(ipadic==1.0.0); fi
rm -rf .whl .carry && mkdir -p .whl  # one corpus a call
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${BINARY[@]}"
python3 -m pip wheel -q --no-deps -w .whl "${SOURCE[@]}"  # pure Python: any interpreter
if [ -n "$DEST" ]; then
  NAME=$(basename "$DEST") STAGE=$(mktemp -d)
  trap 'rm -rf "$STAGE"' EXIT
  mkdir -p "$STAGE/$NAME/raw" "$STAGE/$NAME/tok" .carry
  cp -r "$DEST/data-bin" "$STAGE/$NAME/"
  for f in "$DEST"/raw/* "$DEST"/tok/*; do  # the test sets' files and glue tables
    case "$(basename "$f")" in
      train*|dev*|valid*|val.*|length_filter*) ;;
      *) cp "$f" "$STAGE/$NAME/${f#"$DEST"/}" ;;
    esac
  done
  tar -cJf ".carry/$NAME.tar.xz" -C "$STAGE" "$NAME"  # xz: a data-bin shrinks about 5x
fi
du -sch .whl .carry 2>/dev/null | tail -1 | sed 's/total$/to carry, besides the checkout/'
if [ "$(du -scm .whl .carry 2>/dev/null | tail -1 | cut -f1)" -gt 58 ]; then
  echo "carry.sh: over 58 MiB: with the checkout it may pass the device's 64 MiB" >&2
  exit 1
fi
