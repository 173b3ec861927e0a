#!/usr/bin/env bash
# Peak memory of fairseq-syntax-preprocess on prefixes of a prepared KFTT train (issue 41
# item 3): the preprocessor's own peak RSS (getrusage RUSAGE_SELF, reported at exit) and,
# apart, eflomal's two processes (eflomal-align and its sampler; VmHWM sampled every
# second), with the recipe's own options.
#
#   bash examples/kftt/preprocess_memory.sh TOK_DIR [SIZES]
#
# TOK_DIR: the tok/ folder of `examples/kftt/prepare.sh --direction en-ja` (train.en,
# train.ja, train.en.conllu, dev/test/tune and their caches). SIZES (default
# "50000 200000 all"): train prefixes; each reuses the train's cached parses, cut to the
# same sentences. PARSE=1 removes the prefix's cache first, so that it is parsed
# (--workers 1, in process). One line per size; work files in a temporary folder.
set -euo pipefail
TOK=${1:?usage: preprocess_memory.sh TOK_DIR [SIZES]}
SIZES=${2:-50000 200000 all}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
export OMP_NUM_THREADS=1

for size in $SIZES; do
  [ "$size" = all ] && size=$(wc -l < "$TOK/train.en")
  D=$OUT/c$size; mkdir -p "$D"
  head -n "$size" "$TOK/train.en" > "$D/train.en"; head -n "$size" "$TOK/train.ja" > "$D/train.ja"
  for s in dev test tune; do cp "$TOK/$s.en" "$TOK/$s.ja" "$TOK/$s.en.conllu" "$D/"; done
  if [ "${PARSE:-0}" != 1 ]; then  # the prefix's parses: the cache's first sentences
    python - "$TOK/train.en.conllu" "$D/train.en" "$size" <<'PY'
import json, sys
from fairseq_syntax.data.side_files import file_sha256
from fairseq_syntax_preprocess.spacy_parse import CACHE_HEADER
cache, text, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
with open(cache, encoding="utf-8") as f, open(text + ".conllu", "w", encoding="utf-8") as out:
    header = json.loads(f.readline()[len(CACHE_HEADER):])
    header.update(sentences=n, source_sha256=file_sha256(text), source_file=text)
    out.write(CACHE_HEADER + json.dumps(header, sort_keys=True) + "\n")
    for line in f:
        out.write(line)
        n -= line == "\n"
        if not n:
            break
PY
  fi
  : > "$D/eflomal.hwm"
  ( while sleep 1; do
      for p in $(pgrep -f 'bin/eflomal' || true); do
        echo "$(awk '/VmHWM/ {print $2}' /proc/$p/status 2>/dev/null) $(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null)"
      done >> "$D/eflomal.hwm"
    done ) &
  sampler=$!
  start=$(date +%s)
  python - -s en -t ja --trainpref "$D/train" --validpref "$D/dev" --testpref "$D/test,$D/tune" \
    --parser en_core_web_sm --source-tokenization parser --align eflomal --workers 1 \
    --vocab-size 16000 --spm-model-type bpe --destdir "$D/bin" --force > "$D/log" 2>&1 <<'PY'
import atexit, resource, sys
atexit.register(lambda: print("self_peak_kb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                              file=sys.stderr))
from fairseq_syntax_preprocess.cli import main
sys.argv[0] = "fairseq-syntax-preprocess"
sys.exit(main())
PY
  wall=$(( $(date +%s) - start ))
  kill $sampler
  peak() { grep -e "$1" "$D/eflomal.hwm" | sort -n | tail -n 1 | cut -d' ' -f1; }
  printf '%s pairs: preprocessor %s KB, eflomal-align %s KB, eflomal sampler %s KB, %d s\n' \
    "$size" "$(awk '/^self_peak_kb/ {print $2}' "$D/log")" "$(peak 'bin/eflomal-align')" \
    "$(peak 'eflomal/bin/eflomal ')" "$wall"
done
