#!/usr/bin/env bash
# Wall time of the whole fairseq-syntax-preprocess run (--parser en_core_web_sm --align
# eflomal --workers 2) against parsing alone with the same spaCy pipeline and workers,
# on the 29,000 Multi30k training pairs, alternating the two, REPEATS times each.
#
#   bash examples/multi30k/time_preprocess.sh DATA_DIR [REPEATS]
#
# DATA_DIR holds train.en / train.de as prepare.sh writes them (spaCy-tokenised, one
# sentence per line), e.g. data/multi30k/tok. Every run starts without a parse cache.
# Prints one line per run and a summary: "parse alone" is the parse-only command
# (python -m fairseq_syntax_preprocess.spacy_parse: loads the pipeline, parses with the
# same worker processes, writes the CoNLL-U), timed from the command line (imports
# included, as for the whole run) and by its own clock (imports excluded); the ratios
# put the whole run's wall time over each. user+sys counts the child processes too.
set -euo pipefail
DATA=${1:?usage: time_preprocess.sh DATA_DIR [REPEATS]}
REPEATS=${2:-3}
WORKERS=${WORKERS:-2}
PARSER=${PARSER:-en_core_web_sm}
EXTRA=(${EXTRA_ARGS:-})  # more fairseq-syntax-preprocess options, e.g. "--eflomal-samplers 1"
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
LOG=$OUT/log

stamp() { python - "$@" <<'EOF'
import resource, subprocess, sys, time
start = time.time()
proc = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=open(sys.argv[1], "w"))
wall = time.time() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
with open("/proc/loadavg") as f:
    load = f.read().split()[0]
print(f"{wall:.1f} {usage.ru_utime + usage.ru_stime:.1f} {load} {proc.returncode}")
EOF
}

for r in $(seq 1 "$REPEATS"); do
  rm -f "$OUT/parse.conllu"
  read -r aw acpu aload arc < <(stamp "$OUT/a.err" python -m fairseq_syntax_preprocess.spacy_parse \
      --parser "$PARSER" --workers "$WORKERS" "$DATA/train.en" -o "$OUT/parse.conllu")
  own=$(sed -n 's/.*parsed [0-9]* sentences in \([0-9.]*\) s (whole command.*/\1/p' "$OUT/a.err")
  rm -rf "$OUT/cache" "$OUT/bin"
  read -r bw bcpu bload brc < <(stamp "$OUT/b.err" fairseq-syntax-preprocess -s en -t de \
      --trainpref "$DATA/train" --parser "$PARSER" --align eflomal --workers "$WORKERS" \
      --parse-cache "$OUT/cache" --destdir "$OUT/bin" "${EXTRA[@]}")
  if [ "$arc" != 0 ] || [ "$brc" != 0 ]; then cat "$OUT/a.err" "$OUT/b.err" >&2; exit 1; fi
  echo "run $r: parse alone ${aw}s (own clock ${own}s, user+sys ${acpu}s, load ${aload}) | whole ${bw}s (user+sys ${bcpu}s, load ${bload})" | tee -a "$LOG"
done
python - "$LOG" <<'EOF'
import re, statistics, sys
rows = [re.findall(r"[\d.]+s|load [\d.]+", line) for line in open(sys.argv[1])]
a = [float(r[0][:-1]) for r in rows]; own = [float(r[1][:-1]) for r in rows]
b = [float(r[4][:-1]) for r in rows]
med = statistics.median
print(f"median: parse alone {med(a):.1f} s (own clock {med(own):.1f} s), whole {med(b):.1f} s; "
      f"ratio whole/parse alone {med(b) / med(a):.2f} (over its own clock {med(b) / med(own):.2f}); "
      f"per run: {', '.join(f'{y / x:.2f}' for x, y in zip(a, b))}")
EOF
